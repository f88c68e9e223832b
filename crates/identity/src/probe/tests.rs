//! The decision of `probe`, rule by rule and in order, against a scripted fake.

use std::collections::VecDeque;

use super::*;
use crate::{ProcessIdentity, RecordIdentity};

const PID: u32 = 4242;
const START: u64 = 1_000;

fn here() -> Place {
    Place {
        host: "build-7".into(),
        boot: "0f2c6a55-8e1b-4b7e-9d3c-2a1f00c0ffee".into(),
        pidns: Some(4_026_531_836),
        timens: Some(4_026_531_834),
    }
}

fn record() -> Recorded {
    Recorded::new(
        ProcessIdentity {
            pid: PID,
            start: START,
        },
        here(),
    )
}

fn with_place(edit: impl FnOnce(&mut Place)) -> Recorded {
    let mut place = here();
    edit(&mut place);
    Recorded::new(
        ProcessIdentity {
            pid: PID,
            start: START,
        },
        place,
    )
}

/// A record, why it is there, and the verdict it must get.
type Case = (&'static str, Recorded, fn(&Verdict) -> bool);

/// Answers from a script and records what was asked.
#[derive(Default)]
struct Fake {
    signals: VecDeque<Signal>,
    snapshot: Option<Result<Snapshot, process::Error>>,
    asked: Vec<&'static str>,
}

impl Fake {
    fn new(signals: &[Signal], snapshot: Option<Result<Snapshot, process::Error>>) -> Self {
        Self {
            signals: signals.iter().copied().collect(),
            snapshot,
            asked: Vec::new(),
        }
    }

    /// A process that must never be looked at.
    fn untouchable() -> Self {
        Self::default()
    }
}

impl Observe for Fake {
    fn signal(&mut self, pid: Pid) -> Signal {
        assert_eq!(pid.as_raw_pid(), 4242, "signal sent to the recorded pid");
        self.asked.push("signal");
        self.signals
            .pop_front()
            .expect("the decision sent an unexpected signal")
    }

    fn snapshot(&mut self, pid: u32) -> Result<Snapshot, process::Error> {
        assert_eq!(pid, PID, "snapshot of the recorded pid");
        self.asked.push("snapshot");
        self.snapshot
            .take()
            .expect("the decision read an unexpected snapshot")
    }
}

fn running(start: u64) -> Option<Result<Snapshot, process::Error>> {
    Some(Ok(Snapshot {
        start: Some(start),
        exited: false,
    }))
}

/// Decides `recorded` against [`here`] and returns the verdict and what was asked.
fn judge(recorded: &Recorded, mut fake: Fake) -> (Verdict, Vec<&'static str>) {
    let place = here();
    let verdict = decide(recorded, Ok(&place), &mut fake);
    (verdict, fake.asked)
}

#[test]
fn the_same_process_is_alive() {
    let (verdict, asked) = judge(&record(), Fake::new(&[Signal::Exists], running(START)));
    assert_eq!(
        verdict,
        Verdict::Alive,
        "same pid, same start, not a zombie"
    );
    assert_eq!(asked, ["signal", "snapshot"], "one signal, one read");
}

#[test]
fn eperm_counts_as_existing() {
    assert_eq!(
        signal_outcome(Err(Errno::PERM)),
        Signal::Exists,
        "EPERM: a process of another user"
    );
    assert_eq!(signal_outcome(Ok(())), Signal::Exists, "success");
    assert_eq!(
        signal_outcome(Err(Errno::SRCH)),
        Signal::NoSuchProcess,
        "ESRCH"
    );
    assert_eq!(
        signal_outcome(Err(Errno::INVAL)),
        Signal::Failed(Errno::INVAL),
        "anything else proves nothing"
    );
}

#[test]
fn esrch_is_gone_without_reading_the_process() {
    let (verdict, asked) = judge(&record(), Fake::new(&[Signal::NoSuchProcess], None));
    assert_eq!(
        verdict,
        Verdict::Gone(GoneReason::NoSuchProcess { pid: PID }),
        "ESRCH proves death"
    );
    assert_eq!(asked, ["signal"], "no read after ESRCH");
}

#[test]
fn another_start_is_gone() {
    let (verdict, _) = judge(&record(), Fake::new(&[Signal::Exists], running(START + 1)));
    assert_eq!(
        verdict,
        Verdict::Gone(GoneReason::PidReused {
            pid: PID,
            recorded: START,
            current: START + 1
        }),
        "a reused pid proves the recorded process ended"
    );
}

#[test]
fn a_zombie_is_gone_whatever_its_start() {
    for start in [Some(START), Some(START + 5), None] {
        let snapshot = Some(Ok(Snapshot {
            start,
            exited: true,
        }));
        let (verdict, _) = judge(&record(), Fake::new(&[Signal::Exists], snapshot));
        assert_eq!(
            verdict,
            Verdict::Gone(GoneReason::Zombie { pid: PID }),
            "zombie with start {start:?}"
        );
    }
}

#[test]
fn a_vanished_entry_is_gone_only_if_signal_0_then_fails() {
    let not_found = || Some(Err(process::Error::NotFound { pid: PID }));
    let (verdict, asked) = judge(
        &record(),
        Fake::new(&[Signal::Exists, Signal::NoSuchProcess], not_found()),
    );
    assert_eq!(
        verdict,
        Verdict::Gone(GoneReason::NoSuchProcess { pid: PID }),
        "exited between the two looks"
    );
    assert_eq!(
        asked,
        ["signal", "snapshot", "signal"],
        "signal 0 asked again"
    );

    let (verdict, _) = judge(
        &record(),
        Fake::new(&[Signal::Exists, Signal::Exists], not_found()),
    );
    assert!(
        matches!(
            verdict,
            Verdict::Unknown(UnknownReason::Hidden { pid: PID, .. })
        ),
        "hidden entry while signal 0 succeeds is unknown, got {verdict:?}"
    );
}

#[test]
fn an_unreadable_entry_is_unknown() {
    let denied = Some(Err(process::Error::Read {
        pid: PID,
        path: "/proc/4242/stat".into(),
        source: io::Error::from(io::ErrorKind::PermissionDenied),
    }));
    let (verdict, _) = judge(&record(), Fake::new(&[Signal::Exists], denied));
    assert!(
        matches!(&verdict, Verdict::Unknown(UnknownReason::Hidden { pid: PID, detail }) if detail.contains("/proc/4242/stat")),
        "EACCES on /proc is unknown and names the file, got {verdict:?}"
    );
}

#[test]
fn malformed_process_output_is_unknown() {
    for error in [
        process::Error::Malformed {
            pid: PID,
            from: "/bin/ps".into(),
            source: crate::Malformed("ps printed more than one process"),
        },
        process::Error::NoStart { pid: PID },
        process::Error::Spawn {
            pid: PID,
            program: "/bin/ps",
            source: io::Error::from(io::ErrorKind::NotFound),
        },
    ] {
        let (verdict, _) = judge(&record(), Fake::new(&[Signal::Exists], Some(Err(error))));
        assert!(
            matches!(
                verdict,
                Verdict::Unknown(UnknownReason::UnreadableIdentity { pid: PID, .. })
            ),
            "unparsable identity is unknown, got {verdict:?}"
        );
    }
    let no_start = Some(Ok(Snapshot {
        start: None,
        exited: false,
    }));
    let (verdict, _) = judge(&record(), Fake::new(&[Signal::Exists], no_start));
    assert!(
        matches!(
            verdict,
            Verdict::Unknown(UnknownReason::UnreadableIdentity { .. })
        ),
        "a live process without a start is unknown, got {verdict:?}"
    );
}

#[test]
fn other_signal_errors_are_unknown() {
    let (verdict, asked) = judge(&record(), Fake::new(&[Signal::Failed(Errno::INVAL)], None));
    assert!(
        matches!(
            verdict,
            Verdict::Unknown(UnknownReason::SignalFailed { pid: PID, .. })
        ),
        "EINVAL proves nothing, got {verdict:?}"
    );
    assert_eq!(asked, ["signal"], "no read after a failed signal");
}

#[test]
fn another_boot_on_this_host_is_gone_before_any_pid_check() {
    let recorded = with_place(|p| {
        p.boot = "11111111-2222-3333-4444-555555555555".into();
        p.pidns = Some(1);
        p.timens = None;
    });
    let (verdict, asked) = judge(&recorded, Fake::untouchable());
    assert_eq!(
        verdict,
        Verdict::Gone(GoneReason::Rebooted {
            recorded: "11111111-2222-3333-4444-555555555555".into(),
            current: here().boot,
        }),
        "a reboot proves death even when the namespaces differ too"
    );
    assert!(asked.is_empty(), "no pid looked at: {asked:?}");
}

#[test]
fn foreign_places_are_unknown_before_any_pid_check() {
    let cases: [Case; 4] = [
        (
            "another host, even with another boot",
            with_place(|p| {
                p.host = "elsewhere".into();
                p.boot = "99999999-8888-7777-6666-555555555555".into();
            }),
            |v| matches!(v, Verdict::Unknown(UnknownReason::ForeignHost { .. })),
        ),
        (
            "another pid namespace",
            with_place(|p| p.pidns = Some(4_026_532_000)),
            |v| matches!(v, Verdict::Unknown(UnknownReason::OtherPidNamespace { .. })),
        ),
        (
            "another time namespace",
            with_place(|p| p.timens = Some(4_026_532_001)),
            |v| {
                matches!(
                    v,
                    Verdict::Unknown(UnknownReason::OtherTimeNamespace { .. })
                )
            },
        ),
        (
            "a time namespace not recorded",
            with_place(|p| p.timens = None),
            |v| {
                matches!(
                    v,
                    Verdict::Unknown(UnknownReason::OtherTimeNamespace { recorded: None, .. })
                )
            },
        ),
    ];
    for (why, recorded, expected) in cases {
        let (verdict, asked) = judge(&recorded, Fake::untouchable());
        assert!(expected(&verdict), "{why}: got {verdict:?}");
        assert!(asked.is_empty(), "{why}: no pid looked at, asked {asked:?}");
    }
}

#[test]
fn legacy_and_malformed_records_are_unknown_before_any_pid_check() {
    let full = record();
    let legacy = Recorded {
        pid: Field::Present(PID),
        ..Recorded::default()
    };
    let no_identity = Recorded {
        identity: Field::Missing,
        ..full.clone()
    };
    fn bad<T>(raw: serde_json::Value) -> Field<T> {
        Field::Malformed {
            raw,
            error: "wrong".into(),
        }
    }
    let cases: Vec<Case> = vec![
        ("no place", legacy, |v| {
            matches!(
                v,
                Verdict::Unknown(UnknownReason::Legacy { missing: "place" })
            )
        }),
        ("no identity", no_identity, |v| {
            matches!(
                v,
                Verdict::Unknown(UnknownReason::Legacy {
                    missing: "identity"
                })
            )
        }),
        (
            "no pid",
            Recorded {
                pid: Field::Missing,
                ..full.clone()
            },
            |v| {
                matches!(
                    v,
                    Verdict::Unknown(UnknownReason::Malformed { field: "pid", .. })
                )
            },
        ),
        (
            "pid 0",
            Recorded {
                pid: Field::Present(0),
                ..full.clone()
            },
            |v| {
                matches!(
                    v,
                    Verdict::Unknown(UnknownReason::Malformed { field: "pid", .. })
                )
            },
        ),
        (
            "pid above i32::MAX",
            Recorded {
                pid: Field::Present(u32::MAX),
                ..full.clone()
            },
            |v| {
                matches!(
                    v,
                    Verdict::Unknown(UnknownReason::Malformed { field: "pid", .. })
                )
            },
        ),
        (
            "malformed pid",
            Recorded {
                pid: bad(serde_json::json!("x")),
                ..full.clone()
            },
            |v| {
                matches!(
                    v,
                    Verdict::Unknown(UnknownReason::Malformed { field: "pid", .. })
                )
            },
        ),
        (
            "malformed place",
            Recorded {
                place: bad(serde_json::json!(1)),
                ..full.clone()
            },
            |v| {
                matches!(
                    v,
                    Verdict::Unknown(UnknownReason::Malformed { field: "place", .. })
                )
            },
        ),
        (
            "malformed identity",
            Recorded {
                identity: bad(serde_json::json!([])),
                ..full.clone()
            },
            |v| {
                matches!(
                    v,
                    Verdict::Unknown(UnknownReason::Malformed {
                        field: "identity",
                        ..
                    })
                )
            },
        ),
        (
            "identity from another boot than its place",
            Recorded {
                identity: Field::Present(RecordIdentity {
                    boot: "other".into(),
                    start: START,
                }),
                ..full.clone()
            },
            |v| {
                matches!(
                    v,
                    Verdict::Unknown(UnknownReason::Malformed {
                        field: "identity.boot",
                        ..
                    })
                )
            },
        ),
        ("empty boot", with_place(|p| p.boot = String::new()), |v| {
            matches!(
                v,
                Verdict::Unknown(UnknownReason::Malformed {
                    field: "place.boot",
                    ..
                })
            )
        }),
    ];
    for (why, recorded, expected) in cases {
        let (verdict, asked) = judge(&recorded, Fake::untouchable());
        assert!(expected(&verdict), "{why}: got {verdict:?}");
        assert!(asked.is_empty(), "{why}: no pid looked at, asked {asked:?}");
    }
}

#[test]
fn an_unreadable_own_place_is_unknown() {
    let error = place::Error::Read {
        path: "/proc/sys/kernel/random/boot_id",
        source: io::Error::from(io::ErrorKind::NotFound),
    };
    let verdict = decide(&record(), Err(error), &mut Fake::untouchable());
    assert!(
        matches!(&verdict, Verdict::Unknown(UnknownReason::PlaceUnavailable { detail }) if detail.contains("boot_id")),
        "no own place, no comparison: got {verdict:?}"
    );
}

#[test]
fn an_unsupported_platform_is_unknown_and_says_which() {
    // What `other.rs` returns everywhere but Linux and macOS: its own place first, so no pid
    // is looked at.
    let error = place::Error::Unsupported { os: "freebsd" };
    let verdict = decide(&record(), Err(error), &mut Fake::untouchable());
    assert!(
        matches!(&verdict, Verdict::Unknown(UnknownReason::PlaceUnavailable { detail })
            if detail.contains("freebsd") && detail.contains("Linux and macOS")),
        "an unsupported platform is no proof of anything: got {verdict:?}"
    );
    // And a process's identity, should a place be known.
    let error = process::Error::Unsupported {
        pid: PID,
        os: "freebsd",
    };
    let (verdict, _) = judge(&record(), Fake::new(&[Signal::Exists], Some(Err(error))));
    assert!(
        matches!(&verdict, Verdict::Unknown(UnknownReason::UnreadableIdentity { pid: PID, detail })
            if detail.contains("freebsd")),
        "an identity that cannot be read here is unknown, never gone: got {verdict:?}"
    );
}

#[test]
fn every_reason_reads_as_a_sentence_naming_what_it_is_about() {
    let verdicts = [
        (Verdict::Alive, "alive"),
        (Verdict::Gone(GoneReason::NoSuchProcess { pid: 7 }), "7"),
        (Verdict::Gone(GoneReason::Zombie { pid: 7 }), "zombie"),
        (
            Verdict::Gone(GoneReason::PidReused {
                pid: 7,
                recorded: 1,
                current: 2,
            }),
            "reused",
        ),
        (
            Verdict::Gone(GoneReason::Rebooted {
                recorded: "a".into(),
                current: "b".into(),
            }),
            "rebooted",
        ),
        (
            Verdict::Unknown(UnknownReason::Legacy { missing: "place" }),
            "by hand",
        ),
        (
            Verdict::Unknown(UnknownReason::ForeignHost {
                recorded: "x".into(),
                current: "y".into(),
            }),
            "\"x\"",
        ),
        (
            Verdict::Unknown(UnknownReason::OtherPidNamespace {
                recorded: Some(5),
                current: None,
            }),
            "none",
        ),
        (
            Verdict::Unknown(UnknownReason::OtherTimeNamespace {
                recorded: Some(5),
                current: Some(6),
            }),
            "6",
        ),
        (
            Verdict::Unknown(UnknownReason::Hidden {
                pid: 7,
                detail: "d".into(),
            }),
            "hidepid",
        ),
    ];
    for (verdict, needle) in verdicts {
        let text = verdict.to_string();
        assert!(
            text.contains(needle),
            "{verdict:?} displays {text:?}, which lacks {needle:?}"
        );
        assert!(!text.ends_with('.'), "{text:?} ends without a period");
    }
}

#[test]
fn a_boot_id_that_is_not_one_is_malformed_never_a_reboot() {
    let ours = here().boot;
    for bad in [
        format!("{ours}\n"),
        format!(" {ours}"),
        ours.replace('-', "_"),
        ours[..35].to_owned(),
        format!("{ours}0"),
        "not-a-boot-id".to_owned(),
    ] {
        let recorded = with_place(|p| p.boot.clone_from(&bad));
        let recorded = Recorded {
            identity: Field::Present(RecordIdentity {
                boot: bad.clone(),
                start: START,
            }),
            ..recorded
        };
        let (verdict, asked) = judge(&recorded, Fake::untouchable());
        assert!(
            matches!(
                verdict,
                Verdict::Unknown(UnknownReason::Malformed {
                    field: "place.boot",
                    ..
                })
            ),
            "{bad:?}: malformed (busy), not a reboot: {verdict:?}"
        );
        assert!(asked.is_empty(), "no pid looked at: {asked:?}");
    }
    assert!(
        super::is_boot_id("0F2C6A55-8E1B-4B7E-9D3C-2A1F00C0FFEE"),
        "macOS: uppercase"
    );
    assert!(super::is_boot_id(&ours), "Linux: lowercase");
}
