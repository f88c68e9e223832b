//! Integration tests of worklane-identity against real processes, one module per operation.
//!
//! Linux only: they read `/proc` themselves to check what the crate reports. The Darwin parsers
//! are unit-tested inside the crate on every platform.
#![cfg(target_os = "linux")]

mod support {
    use std::fs;
    use std::process::{Command, Stdio};

    use serde_json::Value;
    use worklane_identity::{Place, ProcessIdentity, Recorded};
    use worklane_testkit::{Child, Gated};

    /// A `sleep` child, started through the fork gate, that is killed and reaped when dropped,
    /// whatever the test did.
    pub(crate) struct Sleeper(pub(crate) Child);

    impl Sleeper {
        pub(crate) fn spawn() -> Self {
            let child = Command::new("sleep")
                .arg("3600")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn_gated()
                .expect("spawn sleep");
            Self(child)
        }

        pub(crate) fn pid(&self) -> u32 {
            self.0.id()
        }
    }

    /// State (field 3) and start (field 22) of `/proc/<pid>/stat`, read independently of the
    /// crate: the fields after the last `)` are separated by single spaces.
    pub(crate) fn proc_stat(pid: u32) -> (char, u64) {
        let bytes =
            fs::read(format!("/proc/{pid}/stat")).expect("read /proc/<pid>/stat in the test");
        let close = bytes
            .iter()
            .rposition(|&b| b == b')')
            .expect("stat has a ')'");
        let rest =
            std::str::from_utf8(&bytes[close + 2..]).expect("stat fields after comm are ASCII");
        let fields: Vec<&str> = rest.split(' ').collect();
        let state = fields[0].chars().next().expect("stat has a state");
        let start = fields[19].parse().expect("stat field 22 is a number");
        (state, start)
    }

    /// The record a holder with identity `process` writes here.
    pub(crate) fn record_of(process: ProcessIdentity) -> Recorded {
        Recorded::new(process, Place::current().expect("read this place").clone())
    }

    /// The JSON of the record of `pid` with `edit` applied, read back as a contender would.
    pub(crate) fn edited_record(pid: u32, edit: impl FnOnce(&mut Value)) -> Recorded {
        let process = ProcessIdentity::of(pid).expect("identity of a live process");
        let mut json = serde_json::to_value(record_of(process)).expect("serialize a record");
        json["owner"] = "agent-1".into();
        json["acquiredAt"] = "2026-11-30T04:27:19Z".into();
        edit(&mut json);
        serde_json::from_value(json).expect("a record always deserializes")
    }

    /// A pid that belonged to a process just killed and reaped.
    pub(crate) fn dead_pid() -> u32 {
        let mut sleeper = Sleeper::spawn();
        let pid = sleeper.pid();
        sleeper.0.kill().expect("kill sleep");
        sleeper.0.wait().expect("reap sleep");
        pid
    }
}

mod place {
    use std::fs;
    use std::os::unix::fs::MetadataExt;

    use worklane_identity::Place;

    #[test]
    fn current_place_is_what_proc_and_uname_show() {
        let place = Place::current().expect("read this place");
        let boot = fs::read_to_string("/proc/sys/kernel/random/boot_id").expect("read boot_id");
        assert_eq!(place.boot, boot.trim(), "boot id is the kernel's boot_id");
        let pidns = fs::metadata("/proc/self/ns/pid")
            .expect("stat pid ns")
            .ino();
        assert_eq!(
            place.pidns,
            Some(pidns),
            "pid namespace is the inode of /proc/self/ns/pid"
        );
        let timens = fs::metadata("/proc/self/ns/time").ok().map(|m| m.ino());
        assert_eq!(
            place.timens, timens,
            "time namespace is the inode of /proc/self/ns/time, if any"
        );
        let host = fs::read_to_string("/proc/sys/kernel/hostname").expect("read hostname");
        assert_eq!(place.host, host.trim(), "host is the uname nodename");
    }

    /// `/proc/uptime`'s first field (`CLOCK_BOOTTIME` of this time namespace, in seconds with
    /// two decimals) as whole milliseconds: the kernel's own reading of the boot clock.
    fn uptime_ms() -> u64 {
        let text = fs::read_to_string("/proc/uptime").expect("read /proc/uptime");
        let first = text
            .split_whitespace()
            .next()
            .expect("uptime has a first field");
        let (secs, hundredths) = first.split_once('.').expect("uptime has two decimals");
        let secs: u64 = secs.parse().expect("whole seconds");
        let hundredths: u64 = hundredths.parse().expect("hundredths");
        secs * 1000 + hundredths * 10
    }

    #[test]
    fn the_boot_clock_is_the_kernels_and_never_goes_back() {
        // Bracketed by the kernel's readings of the same clock, which /proc/uptime truncates
        // to hundredths: an ordering, not a duration.
        let before = uptime_ms();
        let first = Place::boot_clock_ms();
        let second = Place::boot_clock_ms();
        let after = uptime_ms();
        assert!(
            before <= first,
            "the boot clock ({first} ms) is not behind /proc/uptime read before it ({before} ms)"
        );
        assert!(
            first <= second,
            "the boot clock never goes back ({first} ms, then {second} ms)"
        );
        assert!(
            second < after + 10,
            "the boot clock ({second} ms) is not ahead of /proc/uptime read after it ({after} ms)"
        );
    }

    #[test]
    fn current_place_is_read_once() {
        let first = Place::current().expect("read this place");
        let second = Place::current().expect("read this place again");
        assert!(
            std::ptr::eq(first, second),
            "the place is cached, not read again"
        );
    }
}

mod identity {
    use worklane_identity::{ProcessIdentity, process};

    use crate::support::{Sleeper, dead_pid, proc_stat};

    #[test]
    fn of_self_is_our_pid_and_proc_start() {
        let me = ProcessIdentity::of_self().expect("identity of the test process");
        assert_eq!(me.pid, std::process::id(), "pid of the test process");
        let (_, start) = proc_stat(me.pid);
        assert_eq!(
            me.start, start,
            "start of the test process is field 22 of its stat"
        );
    }

    #[test]
    fn of_a_child_is_its_pid_and_proc_start() {
        let sleeper = Sleeper::spawn();
        let child = ProcessIdentity::of(sleeper.pid()).expect("identity of a sleep child");
        assert_eq!(child.pid, sleeper.pid(), "pid of the child");
        let (_, start) = proc_stat(sleeper.pid());
        assert_eq!(
            child.start, start,
            "start of the child is field 22 of its stat"
        );
        let me = ProcessIdentity::of_self().expect("identity of the test process");
        assert!(
            child.start >= me.start,
            "a child starts no earlier than its parent"
        );
    }

    #[test]
    fn of_a_reaped_child_is_not_found() {
        let pid = dead_pid();
        let error = ProcessIdentity::of(pid).expect_err("a reaped child has no identity");
        assert!(
            matches!(error, process::Error::NotFound { pid: p } if p == pid),
            "not found, got {error:?}"
        );
    }

    #[test]
    fn of_an_impossible_pid_is_refused() {
        for pid in [0, u32::MAX] {
            let error = ProcessIdentity::of(pid).expect_err("not a pid");
            assert!(
                matches!(error, process::Error::InvalidPid { .. }),
                "pid {pid}: got {error:?}"
            );
        }
    }
}

mod probe {
    use rustix::process::{Pid, WaitId, WaitIdOptions, waitid};
    use serde_json::json;
    use worklane_identity::{GoneReason, ProcessIdentity, Recorded, UnknownReason, Verdict, probe};

    use crate::support::{Sleeper, dead_pid, edited_record, proc_stat, record_of};

    #[test]
    fn the_test_process_is_alive() {
        let me = record_of(ProcessIdentity::of_self().expect("identity of the test process"));
        assert_eq!(probe(&me), Verdict::Alive, "our own record");
    }

    #[test]
    fn a_running_child_is_alive() {
        let sleeper = Sleeper::spawn();
        let record = edited_record(sleeper.pid(), |_| {});
        assert_eq!(probe(&record), Verdict::Alive, "a sleeping child");
    }

    #[test]
    fn a_killed_and_reaped_child_is_gone() {
        let mut sleeper = Sleeper::spawn();
        let record = edited_record(sleeper.pid(), |_| {});
        sleeper.0.kill().expect("kill sleep");
        sleeper.0.wait().expect("reap sleep");
        assert_eq!(
            probe(&record),
            Verdict::Gone(GoneReason::NoSuchProcess { pid: sleeper.pid() }),
            "signal 0 answers ESRCH for a reaped child"
        );
    }

    #[test]
    fn a_zombie_child_is_gone() {
        let mut sleeper = Sleeper::spawn();
        let pid = sleeper.pid();
        let record = edited_record(pid, |_| {});
        sleeper.0.kill().expect("kill sleep");
        // Wait until it has exited, without reaping it.
        let raw = Pid::from_raw(i32::try_from(pid).expect("pid fits i32")).expect("pid is not 0");
        waitid(
            WaitId::Pid(raw),
            WaitIdOptions::EXITED | WaitIdOptions::NOWAIT,
        )
        .expect("waitid on the child");
        assert_eq!(
            proc_stat(pid).0,
            'Z',
            "the killed, unreaped child is a zombie"
        );
        assert_eq!(
            probe(&record),
            Verdict::Gone(GoneReason::Zombie { pid }),
            "a zombie has exited"
        );
        sleeper.0.wait().expect("reap the zombie");
    }

    #[test]
    fn our_pid_with_another_start_is_gone() {
        let me = ProcessIdentity::of_self().expect("identity of the test process");
        let earlier = ProcessIdentity {
            start: me.start - 1,
            ..me
        };
        assert_eq!(
            probe(&record_of(earlier)),
            Verdict::Gone(GoneReason::PidReused {
                pid: me.pid,
                recorded: me.start - 1,
                current: me.start
            }),
            "our pid with an earlier start is a process that ended"
        );
    }

    #[test]
    fn this_host_with_another_boot_is_gone_even_if_the_pid_is_alive() {
        let sleeper = Sleeper::spawn();
        let other_boot = "00000000-0000-4000-8000-000000000000";
        let record = edited_record(sleeper.pid(), |json| {
            json["place"]["boot"] = other_boot.into();
            json["identity"]["boot"] = other_boot.into();
        });
        let verdict = probe(&record);
        assert!(
            matches!(&verdict, Verdict::Gone(GoneReason::Rebooted { recorded, .. }) if recorded == other_boot),
            "a record from before a reboot is gone, got {verdict:?}"
        );
    }

    /// A record, why it is there, and the verdict it must get.
    type Case = (&'static str, Recorded, fn(&Verdict) -> bool);

    /// Each foreign or incomplete record names a pid that is provably dead here, and is still
    /// unknown: no pid is looked at before the record is known to be from here.
    #[test]
    fn foreign_malformed_and_legacy_records_are_unknown_even_for_a_dead_pid() {
        let alive = Sleeper::spawn();
        let dead = dead_pid();
        let dead_here = |edit: fn(&mut serde_json::Value)| {
            edited_record(alive.pid(), |json| {
                json["pid"] = dead.into();
                edit(json);
            })
        };
        let cases: [Case; 8] = [
            (
                "another host",
                dead_here(|json| json["place"]["host"] = "some-other-host".into()),
                |v| matches!(v, Verdict::Unknown(UnknownReason::ForeignHost { .. })),
            ),
            (
                "another pid namespace",
                dead_here(|json| json["place"]["pidns"] = 1.into()),
                |v| matches!(v, Verdict::Unknown(UnknownReason::OtherPidNamespace { .. })),
            ),
            (
                "another time namespace",
                dead_here(|json| json["place"]["timens"] = 2.into()),
                |v| {
                    matches!(
                        v,
                        Verdict::Unknown(UnknownReason::OtherTimeNamespace { .. })
                    )
                },
            ),
            (
                "a namespace written as a string",
                dead_here(|json| json["place"]["pidns"] = "pid:[4026531836]".into()),
                |v| {
                    matches!(
                        v,
                        Verdict::Unknown(UnknownReason::Malformed { field: "place", .. })
                    )
                },
            ),
            (
                "a start that is not a number",
                dead_here(|json| json["identity"]["start"] = "12".into()),
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
                "a pid that is not a number",
                dead_here(|json| json["pid"] = json!([1])),
                |v| {
                    matches!(
                        v,
                        Verdict::Unknown(UnknownReason::Malformed { field: "pid", .. })
                    )
                },
            ),
            (
                "a legacy record without place and identity",
                dead_here(|json| {
                    let object = json.as_object_mut().expect("a record is an object");
                    object.remove("place");
                    object.remove("identity");
                }),
                |v| {
                    matches!(
                        v,
                        Verdict::Unknown(UnknownReason::Legacy { missing: "place" })
                    )
                },
            ),
            (
                "a record without identity",
                dead_here(|json| json["identity"] = serde_json::Value::Null),
                |v| {
                    matches!(
                        v,
                        Verdict::Unknown(UnknownReason::Legacy {
                            missing: "identity"
                        })
                    )
                },
            ),
        ];
        for (why, record, expected) in cases {
            let verdict = probe(&record);
            assert!(
                expected(&verdict),
                "{why} must be unknown, got {verdict:?} for {record:?}"
            );
        }
        // The control: the same dead pid in a complete record from here is gone.
        let control = dead_here(|_| {});
        assert_eq!(
            probe(&control),
            Verdict::Gone(GoneReason::NoSuchProcess { pid: dead }),
            "the control is gone"
        );
    }
}

/// A process of another user answers signal 0 with EPERM and is alive.
///
/// As root, the test re-runs its own binary as user 65534 (nobody) under `setpriv`, with the
/// record of a root-owned `sleep` in an environment variable; in that run the same test is the
/// subject: it probes the record and prints what it saw, and the parent checks it.
mod eperm {
    use std::io::Write;
    use std::os::unix::fs::PermissionsExt;
    use std::process::{Command, Stdio};
    use std::{env, fs};
    use worklane_testkit::{Gated, gate};

    use rustix::io::Errno;
    use rustix::process::{Pid, geteuid, test_kill_process};
    use worklane_identity::{Field, Recorded, probe};

    use crate::support::{Sleeper, edited_record};

    const RECORD_VAR: &str = "WORKLANE_IDENTITY_TEST_EPERM_RECORD";
    const TEST_NAME: &str = "eperm::a_process_of_another_user_is_alive";
    const NOBODY: u32 = 65_534;

    #[test]
    fn a_process_of_another_user_is_alive() {
        if let Ok(record) = env::var(RECORD_VAR) {
            subject(&record);
            return;
        }
        assert!(
            geteuid().is_root(),
            "this test runs the subject as user {NOBODY} with setpriv and must start as root"
        );
        let root_owned = Sleeper::spawn();
        let record =
            serde_json::to_string(&edited_record(root_owned.pid(), |_| {})).expect("serialize");

        // Our own binary may sit under directories user 65534 cannot enter: run a copy.
        let dir = tempfile::tempdir().expect("make a temp dir");
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).expect("chmod temp dir");
        let exe = dir.path().join("identity-subject");
        // Copied with the fork gate quiet: a child another test starts meanwhile would hold a
        // copy of the descriptor the copy is written through until it execs, and exec of a file
        // open for writing anywhere fails with ETXTBSY.
        gate::quietly(|| fs::copy(env::current_exe().expect("find the test binary"), &exe))
            .expect("copy the test binary");
        fs::set_permissions(&exe, fs::Permissions::from_mode(0o755)).expect("chmod the copy");

        let output = Command::new("setpriv")
            .args([
                format!("--reuid={NOBODY}"),
                format!("--regid={NOBODY}"),
                "--clear-groups".into(),
            ])
            .arg("--")
            .arg(&exe)
            .args(["--exact", TEST_NAME, "--nocapture", "--test-threads=1"])
            .env(RECORD_VAR, &record)
            .stdin(Stdio::null())
            .output_gated()
            .expect("run setpriv");
        let stdout = String::from_utf8_lossy(&output.stdout);
        let stderr = String::from_utf8_lossy(&output.stderr);
        let report = format!(
            "subject status {}\nstdout:\n{stdout}\nstderr:\n{stderr}",
            output.status
        );
        assert!(output.status.success(), "the subject must pass\n{report}");
        assert!(
            stdout.contains(&format!("SUBJECT euid={NOBODY}\n")),
            "the subject runs as nobody\n{report}"
        );
        assert!(
            stdout.contains("SUBJECT signal0=EPERM\n"),
            "signal 0 to a root process is EPERM\n{report}"
        );
        assert!(
            stdout.contains("SUBJECT verdict=Alive\n"),
            "EPERM counts as alive\n{report}"
        );
    }

    /// Run as user 65534: probe the record and report.
    fn subject(record: &str) {
        let record: Recorded = serde_json::from_str(record).expect("the parent's record parses");
        let Field::Present(pid) = record.pid else {
            panic!("the parent's record has a pid: {record:?}")
        };
        let raw = Pid::from_raw(i32::try_from(pid).expect("pid fits i32")).expect("pid is not 0");
        let signal = match test_kill_process(raw) {
            Ok(()) => "OK".to_owned(),
            Err(Errno::PERM) => "EPERM".to_owned(),
            Err(errno) => format!("{errno:?}"),
        };
        let verdict = probe(&record);
        let mut out = std::io::stdout().lock();
        write!(
            out,
            "SUBJECT euid={}\nSUBJECT signal0={signal}\nSUBJECT verdict={verdict:?}\n",
            geteuid().as_raw()
        )
        .expect("write to stdout");
    }
}

/// A `/proc` mounted with `hidepid=1` (`noaccess`) shows every pid but refuses other users'
/// entries: such a process exists (signal 0 answers EPERM) and its identity cannot be read, so
/// it is unknown, never gone.
///
/// As root, the test re-runs its own binary in a mount namespace of its own (`unshare`), where
/// a fresh `/proc` of the same pid namespace is mounted with `hidepid=1`, as user 65534
/// (`setpriv`); in that run the same test is the subject, as in [`eperm`](crate::eperm).
mod hidepid {
    use std::io::Write;
    use std::os::unix::fs::PermissionsExt;
    use std::process::{Command, Stdio};
    use std::{env, fs};
    use worklane_testkit::{Gated, gate};

    use rustix::process::geteuid;
    use worklane_identity::{Field, ProcessIdentity, Recorded, probe, process};

    use crate::support::{Sleeper, edited_record};

    const RECORD_VAR: &str = "WORKLANE_IDENTITY_TEST_HIDEPID_RECORD";
    const TEST_NAME: &str = "hidepid::a_process_whose_entry_is_refused_is_unknown";

    #[test]
    fn a_process_whose_entry_is_refused_is_unknown() {
        if let Ok(record) = env::var(RECORD_VAR) {
            subject(&record);
            return;
        }
        assert!(
            geteuid().is_root(),
            "this test mounts a /proc and runs the subject as user 65534, and must start as root"
        );
        let root_owned = Sleeper::spawn();
        let record =
            serde_json::to_string(&edited_record(root_owned.pid(), |_| {})).expect("serialize");

        // Our own binary may sit under directories user 65534 cannot enter: run a copy, copied
        // with the fork gate quiet (see `eperm`).
        let dir = tempfile::tempdir().expect("make a temp dir");
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).expect("chmod temp dir");
        let exe = dir.path().join("identity-subject");
        gate::quietly(|| fs::copy(env::current_exe().expect("find the test binary"), &exe))
            .expect("copy the test binary");
        fs::set_permissions(&exe, fs::Permissions::from_mode(0o755)).expect("chmod the copy");

        let script = "mount -t proc -o hidepid=1 proc /proc && \
                      exec setpriv --reuid=65534 --regid=65534 --clear-groups -- \"$0\" \"$@\"";
        let output = Command::new("unshare")
            .args([
                "--mount",
                "--propagation",
                "private",
                "--",
                "sh",
                "-c",
                script,
            ])
            .arg(&exe)
            .args(["--exact", TEST_NAME, "--nocapture", "--test-threads=1"])
            .env(RECORD_VAR, &record)
            .stdin(Stdio::null())
            .output_gated()
            .expect("run unshare");
        let stdout = String::from_utf8_lossy(&output.stdout);
        let stderr = String::from_utf8_lossy(&output.stderr);
        let report = format!(
            "subject status {}\nstdout:\n{stdout}\nstderr:\n{stderr}",
            output.status
        );
        assert!(output.status.success(), "the subject must pass\n{report}");
        let path = format!("/proc/{}/stat", root_owned.pid());
        assert!(
            stdout.contains(&format!("SUBJECT identity=cannot read {path}\n")),
            "the entry exists and cannot be read: a read error naming the file, not \"not \
             found\"\n{report}"
        );
        assert!(
            stdout.contains(&format!("SUBJECT hidden=true cannot read {path}\n")),
            "the verdict is unknown because the entry is hidden, naming the file\n{report}"
        );
    }

    /// Run as user 65534 under `hidepid=1`: read the identity, probe the record, and report.
    fn subject(record: &str) {
        let record: Recorded = serde_json::from_str(record).expect("the parent's record parses");
        let Field::Present(pid) = record.pid else {
            panic!("the parent's record has a pid: {record:?}")
        };
        let identity = match ProcessIdentity::of(pid) {
            Err(error @ process::Error::Read { .. }) => error.to_string(),
            other => format!("not a read error: {other:?}"),
        };
        let verdict = probe(&record);
        let hidden = match &verdict {
            worklane_identity::Verdict::Unknown(worklane_identity::UnknownReason::Hidden {
                detail,
                ..
            }) => format!("true {}", detail.split(':').next().unwrap_or_default()),
            other => format!("false {other:?}"),
        };
        let mut out = std::io::stdout().lock();
        write!(
            out,
            "SUBJECT identity={identity}\nSUBJECT hidden={hidden}\n"
        )
        .expect("write to stdout");
    }
}
