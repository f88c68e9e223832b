//! Integration tests of `worklane-lease`: real directories, real guards, real processes killed,
//! stopped and raced, and exact time through an injected clock. One binary, a module per
//! behaviour.
//!
//! Tests run on several threads, and a child being started by one holds copies of every
//! descriptor of the process until it execs, a guard's included. So processes are started
//! through the fork gate, and whatever takes and releases a guard in this process while
//! something later needs it free runs with the gate quiet: `Site::acquire` (a refusal or a
//! TTL acquisition releases the guard before it returns), the leases `Site::held` returns
//! (`QuietDrop`), and the pulses and re-verifications that take the guard for a moment.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{ChildStdin, ChildStdout, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;
use worklane_identity::{Place, ProcessIdentity, Recorded};
use worklane_lease::{
    Acquired, Lease, LiveWhy, ManualClock, Options, Record, Refusal, Request, acquire,
    acquire_each, claim_name, current_epoch, held,
};
use worklane_slotfile::{RECORD_MODE, SlotDir};
use worklane_testkit::gate::{self, QuietDrop};
use worklane_testkit::{Child, Gated};

const LOCK: &str = "agent-0.lock";

struct Site {
    temp: tempfile::TempDir,
    dir: SlotDir,
}

impl Site {
    fn new() -> Site {
        let temp = tempfile::tempdir().expect("temp dir");
        let dir = SlotDir::open(temp.path()).expect("open slot dir");
        Site { temp, dir }
    }

    fn path(&self) -> &Path {
        self.temp.path()
    }

    /// Acquires with the gate quiet: a refusal, or a lease under TTL liveness, has taken the
    /// guard and released it again by the time this returns, and the next step may need it
    /// free. (Never from a thread that another thread waits for inside a hook.)
    fn acquire(&self, owner: &str, options: &Options) -> Acquired {
        gate::quietly(|| acquire(&self.dir, LOCK, &Request::new(owner), options))
            .expect("acquire must not fail")
    }

    /// Acquires a lease that must be free; it is released with the gate quiet.
    fn held(&self, owner: &str, options: &Options) -> QuietDrop<Lease> {
        match self.acquire(owner, options) {
            Acquired::Held(lease) => QuietDrop::new(lease),
            Acquired::Refused(r) => panic!("{owner} must get the lease, was refused: {r}"),
        }
    }

    fn refused(&self, owner: &str, options: &Options) -> Refusal {
        match self.acquire(owner, options) {
            Acquired::Refused(r) => r,
            Acquired::Held(lease) => panic!("{owner} must be refused, got epoch {}", lease.epoch()),
        }
    }

    fn record(&self) -> Option<Record> {
        let raw = std::fs::read(self.path().join(LOCK)).ok()?;
        Some(Record::parse(&raw).expect("the record on disk parses"))
    }

    fn write_record(&self, record: &Record) {
        self.dir
            .file(LOCK)
            .expect("valid")
            .replace(&record.to_bytes(), RECORD_MODE)
            .expect("write record");
    }

    fn write_raw(&self, bytes: &[u8]) {
        std::fs::write(self.path().join(LOCK), bytes).expect("write raw record");
    }

    fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(self.path())
            .expect("list")
            .map(|e| e.expect("entry").file_name().into_string().expect("utf-8"))
            .filter(|n| !n.starts_with('.'))
            // The event journal a takeover appends to is the directory's, not the lease's.
            .filter(|n| !n.starts_with("journal."))
            .collect();
        names.sort();
        names
    }
}

/// The record of a process that ran here and is provably gone (killed and reaped).
fn dead_record(owner: &str) -> Record {
    let mut child = Command::new("sleep")
        .arg("600")
        .stdin(Stdio::null())
        .spawn_gated()
        .expect("spawn sleep");
    let identity = ProcessIdentity::of(child.id()).expect("identity of sleep");
    child.kill().expect("kill");
    child.wait().expect("reap");
    Record {
        holder: Recorded::new(identity, Place::current().expect("place").clone()),
        owner: Some(owner.to_owned()),
        acquired_at: Some("2026-01-01T00:00:00.000Z".to_owned()),
        ..Record::default()
    }
}

/// A lease-holder child with piped stdin/stdout.
struct Holder {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
}

impl Holder {
    fn spawn(site: &Site, owner: &str, extra: &[&str]) -> Holder {
        Holder::spawn_with(
            Command::new(env!("CARGO_BIN_EXE_lease-holder")),
            site,
            owner,
            extra,
        )
    }

    fn spawn_with(mut cmd: Command, site: &Site, owner: &str, extra: &[&str]) -> Holder {
        let mut child = cmd
            .arg(site.path())
            .args([LOCK, owner])
            .args(extra)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn_gated()
            .expect("spawn lease-holder");
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().expect("stdout"));
        Holder {
            child,
            stdin,
            stdout,
        }
    }

    /// The holder's next line, waited for 5 s at most: a holder that never says it (a step
    /// it never reaches, a hook never asked) fails the test instead of hanging it.
    fn line(&mut self) -> String {
        use rustix::event::{PollFd, PollFlags, Timespec, poll};
        if self.stdout.buffer().is_empty() {
            let deadline = std::time::Instant::now() + Duration::from_secs(5);
            loop {
                let left = deadline.saturating_duration_since(std::time::Instant::now());
                let spec = Timespec {
                    tv_sec: i64::try_from(left.as_secs()).unwrap_or(i64::MAX),
                    tv_nsec: i64::from(left.subsec_nanos()),
                };
                let mut fds = [PollFd::new(self.stdout.get_ref(), PollFlags::IN)];
                match poll(&mut fds, Some(&spec)) {
                    Ok(0) => panic!("lease-holder said nothing within 5 s"),
                    Ok(_) => break,
                    Err(rustix::io::Errno::INTR) => {}
                    Err(e) => panic!("poll lease-holder's output: {e}"),
                }
            }
        }
        let mut line = String::new();
        self.stdout
            .read_line(&mut line)
            .expect("read from lease-holder");
        line.trim().to_owned()
    }

    fn send(&mut self, command: &str) -> String {
        let stdin = self.stdin.as_mut().expect("stdin open");
        writeln!(stdin, "{command}").expect("send a command");
        stdin.flush().expect("flush");
        self.line()
    }

    /// Waits for `held EPOCH PID` and returns the epoch.
    fn expect_held(&mut self) -> u64 {
        let line = self.line();
        let mut words = line.split_whitespace();
        assert_eq!(
            words.next(),
            Some("held"),
            "lease-holder must hold: {line:?}"
        );
        words
            .next()
            .and_then(|e| e.parse().ok())
            .unwrap_or_else(|| panic!("held line carries the epoch: {line:?}"))
    }

    fn kill(mut self) {
        self.child.kill().expect("SIGKILL");
        self.child.wait().expect("reap");
    }

    fn finish(mut self) {
        drop(self.stdin.take());
        let status = self.child.wait().expect("wait");
        assert!(
            status.success() || status.code() == Some(1),
            "holder exit: {status}"
        );
    }

    fn signal(&self, signal: rustix::process::Signal) {
        let pid = rustix::process::Pid::from_raw(self.child.id() as i32).expect("pid");
        rustix::process::kill_process(pid, signal).expect("signal the holder");
    }
}

fn ttl_options(ttl_ms: u64, clock: &ManualClock) -> Options {
    Options::ttl(Duration::from_millis(ttl_ms)).clock(Arc::new(clock.clone()))
}

mod basics {
    use super::*;

    #[test]
    fn acquire_refuse_release_reacquire() {
        let site = Site::new();
        let lease = site.held("first", &Options::process());
        assert_eq!(lease.record().owner.as_deref(), Some("first"));
        let refusal = site.refused("second", &Options::process());
        assert_eq!(
            refusal.why,
            LiveWhy::GuardHeld,
            "a live holder keeps its guard"
        );
        let holder = refusal
            .holder
            .as_ref()
            .expect("the refusal names the holder");
        assert_eq!(holder.pid(), Some(std::process::id()), "holder pid");
        assert_eq!(holder.owner.as_deref(), Some("first"), "holder owner");
        assert!(holder.acquired_at.is_some(), "acquiredAt");
        let text = refusal.to_string();
        assert!(
            text.contains(&format!("pid {}", std::process::id())),
            "{text}"
        );
        lease.end(Lease::release).expect("release");
        assert_eq!(site.record(), None, "release removes our record");
        site.held("second", &Options::process())
            .end(Lease::release)
            .expect("release");
    }

    #[test]
    fn drop_releases() {
        let site = Site::new();
        drop(site.held("first", &Options::process()));
        assert_eq!(site.record(), None, "dropping the lease removes the record");
        drop(site.held("second", &Options::process()));
    }

    #[test]
    fn records_carry_place_identity_and_fields() {
        let site = Site::new();
        let request = Request::new("me")
            .field("limit_ms", 5000)
            .field("role", "r");
        let Acquired::Held(lease) =
            acquire(&site.dir, LOCK, &request, &Options::process()).expect("acquire")
        else {
            panic!("free");
        };
        let on_disk = site.record().expect("record");
        assert_eq!(
            &on_disk,
            lease.record(),
            "the file holds what the lease says"
        );
        assert!(on_disk.holder.place.present().is_some(), "place written");
        assert!(
            on_disk.holder.identity.present().is_some(),
            "identity written"
        );
        assert_eq!(on_disk.extra.get("limit_ms"), Some(&5000.into()));
        assert_eq!(on_disk.epoch, Some(lease.epoch()));
    }

    #[test]
    fn lock_names_too_long_for_their_epoch_and_claims_are_refused_up_front() {
        let site = Site::new();
        let longest = format!("{}.lock", "a".repeat(worklane_lease::MAX_LOCK_NAME - 5));
        let Acquired::Held(lease) = acquire(
            &site.dir,
            &longest,
            &Request::new("me"),
            &Options::process(),
        )
        .expect("the longest name works, epoch marker included") else {
            panic!("free");
        };
        lease.release().expect("release");
        let too_long = format!("a{longest}");
        let err = acquire(
            &site.dir,
            &too_long,
            &Request::new("me"),
            &Options::process(),
        )
        .expect_err("one byte more is refused");
        assert!(
            matches!(err, worklane_lease::acquire::Error::NameTooLong { .. }),
            "{err:?}"
        );
        assert!(
            err.to_string().contains("shorter name"),
            "says what to do: {err}"
        );
    }

    #[test]
    fn reserved_fields_are_refused() {
        let site = Site::new();
        let err = acquire(
            &site.dir,
            LOCK,
            &Request::new("me").field("pid", 1),
            &Options::process(),
        )
        .expect_err("pid is written by the core");
        assert!(err.to_string().contains("`pid`"), "{err}");
        assert!(site.names().is_empty(), "nothing written");
    }
}

mod busy_records {
    use super::*;
    use worklane_identity::{Field, UnknownReason};

    fn refused_with_guard_free(site: &Site) -> LiveWhy {
        let refusal = match site.acquire("contender", &Options::process()) {
            Acquired::Refused(r) => r,
            Acquired::Held(lease) => panic!("must be refused, got epoch {}", lease.epoch()),
        };
        assert_ne!(
            refusal.why,
            LiveWhy::GuardHeld,
            "the guard is free in these cases"
        );
        assert!(site.path().join(LOCK).exists(), "the busy record is kept");
        refusal.why
    }

    #[test]
    fn malformed_records_stay_busy() {
        let site = Site::new();
        for bytes in [&b""[..], b"{", b"[1]", br#"{"owner": 7}"#] {
            site.write_raw(bytes);
            let why = refused_with_guard_free(&site);
            assert!(
                matches!(why, LiveWhy::Malformed { .. }),
                "{bytes:?}: {why:?}"
            );
            assert!(
                why.to_string().contains("remove it"),
                "says what to do: {why}"
            );
            assert_eq!(std::fs::read(site.path().join(LOCK)).expect("kept"), bytes);
        }
    }

    #[test]
    fn a_running_holder_behind_a_free_guard_stays_busy() {
        let site = Site::new();
        let mut record = dead_record("running");
        record.holder = Recorded::new(
            ProcessIdentity::of_self().expect("me"),
            Place::current().expect("place").clone(),
        );
        site.write_record(&record);
        let why = refused_with_guard_free(&site);
        assert_eq!(
            why,
            LiveWhy::Alive,
            "a record whose process runs is never taken over, guard or not"
        );
    }

    #[test]
    fn legacy_records_stay_busy() {
        let site = Site::new();
        let mut record = dead_record("legacy");
        record.holder.place = Field::Missing;
        record.holder.identity = Field::Missing;
        site.write_record(&record);
        let why = refused_with_guard_free(&site);
        assert!(
            matches!(why, LiveWhy::Unknown(UnknownReason::Legacy { .. })),
            "a dead pid without identity is never taken over: {why:?}"
        );
    }

    #[test]
    fn foreign_host_records_stay_busy() {
        let site = Site::new();
        let mut record = dead_record("remote");
        if let Field::Present(place) = &mut record.holder.place {
            place.host = "another-host".to_owned();
        }
        site.write_record(&record);
        let why = refused_with_guard_free(&site);
        assert!(
            matches!(why, LiveWhy::Unknown(UnknownReason::ForeignHost { .. })),
            "{why:?}"
        );
    }

    #[test]
    fn other_pid_namespace_records_stay_busy() {
        let site = Site::new();
        let mut record = dead_record("contained");
        if let Field::Present(place) = &mut record.holder.place {
            place.pidns = Some(place.pidns.unwrap_or(0) + 1);
        }
        site.write_record(&record);
        let why = refused_with_guard_free(&site);
        assert!(
            matches!(
                why,
                LiveWhy::Unknown(UnknownReason::OtherPidNamespace { .. })
            ),
            "{why:?}"
        );
    }

    #[test]
    fn the_control_case_a_dead_local_record_is_taken_over() {
        let site = Site::new();
        site.write_record(&dead_record("dead"));
        let lease = site.held("taker", &Options::process());
        assert_eq!(site.record().expect("ours").owner.as_deref(), Some("taker"));
        drop(lease);
    }
}

mod guard_held_records {
    //! A record that declares `holdsGuard: true` is dead as soon as its guard is free, whatever
    //! host, boot or namespace it names: a holder killed inside a container frees its slot at
    //! once. Records without the declaration keep the identity rule.
    use super::*;
    use worklane_identity::Field;

    /// `unshare` with `--kill-child`: killing it SIGKILLs the holder inside the namespaces.
    fn contained(namespaces: &[&str]) -> Command {
        let mut cmd = Command::new("unshare");
        cmd.args(namespaces)
            .args(["--fork", "--kill-child", "--mount-proc"])
            .arg(env!("CARGO_BIN_EXE_lease-holder"));
        cmd
    }

    fn killed_inside(namespaces: &[&str]) {
        let site = Site::new();
        let mut holder = Holder::spawn_with(contained(namespaces), &site, "contained", &[]);
        let first = holder.expect_held();
        let record = site.record().expect("the contained holder's record");
        assert_eq!(
            record.holds_guard,
            Some(true),
            "a process-liveness record declares that its holder keeps the guard"
        );
        let refusal = site.refused("host", &Options::process());
        assert_eq!(refusal.why, LiveWhy::GuardHeld, "alive: its guard is held");
        holder.kill();
        // unshare is gone; the kernel kills the holder inside the namespace a moment later.
        let mut lease = None;
        for _ in 0..500 {
            match site.acquire("host", &Options::process()) {
                Acquired::Held(held) => {
                    lease = Some(QuietDrop::new(held));
                    break;
                }
                Acquired::Refused(r) => assert_eq!(
                    r.why,
                    LiveWhy::GuardHeld,
                    "only the dying holder's guard may refuse us: {r}"
                ),
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let lease = lease.expect("the lock is free once the contained holder is dead");
        assert!(lease.epoch() > first, "taken over with a larger epoch");
        assert_eq!(
            site.record().expect("ours").owner.as_deref(),
            Some("host"),
            "the record of a holder killed in {namespaces:?} is taken over at once"
        );
        drop(lease);
    }

    #[test]
    fn a_holder_killed_in_another_pid_namespace_frees_the_lock_at_once() {
        killed_inside(&["--pid"]);
    }

    #[test]
    fn a_holder_killed_in_another_time_namespace_frees_the_lock_at_once() {
        killed_inside(&["--pid", "--time"]);
    }

    fn declaring(mut record: Record, change: impl FnOnce(&mut worklane_identity::Place)) -> Record {
        if let Field::Present(place) = &mut record.holder.place {
            change(place);
        }
        record.holds_guard = Some(true);
        record
    }

    #[test]
    fn a_declaring_record_from_anywhere_is_dead_once_its_guard_is_free() {
        let alive = Recorded::new(
            ProcessIdentity::of_self().expect("me"),
            Place::current().expect("place").clone(),
        );
        let running = Record {
            holder: alive,
            ..dead_record("running")
        };
        let cases: Vec<(&str, Record)> = vec![
            (
                "foreign host",
                declaring(dead_record("a"), |p| p.host = "elsewhere".into()),
            ),
            (
                "other pid namespace",
                declaring(dead_record("b"), |p| {
                    p.pidns = Some(p.pidns.unwrap_or(0) + 1)
                }),
            ),
            (
                "other boot",
                declaring(dead_record("c"), |p| p.boot = "another-boot".into()),
            ),
            // Even a record naming this very (running) process: the guard is what it declared.
            ("a running pid", declaring(running, |_| {})),
        ];
        for (what, record) in cases {
            let site = Site::new();
            site.write_record(&record);
            let lease = site.held("taker", &Options::process());
            assert_eq!(
                site.record().expect("ours").owner.as_deref(),
                Some("taker"),
                "{what}: a declaring record behind a free guard is taken over"
            );
            drop(lease);
        }
    }

    #[test]
    fn only_json_true_declares() {
        for value in [r#""yes""#, "1", "null", "false"] {
            let site = Site::new();
            let mut record = dead_record("contained");
            if let Field::Present(place) = &mut record.holder.place {
                place.pidns = Some(place.pidns.unwrap_or(0) + 1);
            }
            let mut text = String::from_utf8(record.to_bytes()).expect("utf-8");
            text.insert_str(1, &format!(r#""holdsGuard":{value},"#));
            site.write_raw(text.as_bytes());
            let refusal = site.refused("taker", &Options::process());
            assert!(
                matches!(refusal.why, LiveWhy::Unknown(_)),
                "holdsGuard {value} is no declaration: the identity rule keeps it busy: {:?}",
                refusal.why
            );
        }
    }

    #[test]
    fn a_ttl_lease_ignores_the_declaration() {
        let site = Site::new();
        let clock = ManualClock::at(1_000_000);
        let mut record = dead_record("ttl");
        record.holds_guard = Some(true);
        record.last_pulse = Some(1_000_000);
        record.ttl_ms = Some(5_000);
        site.write_record(&record);
        let refusal = site.refused("taker", &ttl_options(5_000, &clock));
        assert!(
            matches!(refusal.why, LiveWhy::Fresh { .. }),
            "a TTL lease is judged by its pulse only: {:?}",
            refusal.why
        );
        assert_eq!(
            site.record().expect("kept").owner.as_deref(),
            Some("ttl"),
            "kept"
        );
    }
}

mod many_at_once {
    //! `acquire_each`: the leases of many resources from one listing, each decided as
    //! `acquire` decides it alone.
    use super::*;

    fn write_record_at(site: &Site, name: &str, record: &Record) {
        site.dir
            .file(name)
            .expect("valid")
            .replace(&record.to_bytes(), RECORD_MODE)
            .expect("write record");
    }

    #[test]
    fn each_resource_is_decided_from_its_own_files() {
        let site = Site::new();
        // "lane-a.lock": free, but with an epoch from before (5) and garbage named as its claim.
        for _ in 0..5 {
            let lease = gate::quietly(|| {
                acquire(
                    &site.dir,
                    "lane-a.lock",
                    &Request::new("before"),
                    &Options::process(),
                )
            })
            .expect("acquire");
            let Acquired::Held(lease) = lease else {
                panic!("free");
            };
            gate::quietly(|| lease.release()).expect("release");
        }
        std::fs::write(
            site.path().join("lane-a.lock.0123456789abcdef.claim"),
            "garbage",
        )
        .expect("plant");
        // "lane-a.lock.more": a name the first is a prefix of, held by a dead holder.
        write_record_at(&site, "lane-a.lock.more", &dead_record("dead"));
        // "lane-b.lock": held by a live lease of this process.
        let live = match gate::quietly(|| {
            acquire(
                &site.dir,
                "lane-b.lock",
                &Request::new("live"),
                &Options::process(),
            )
        })
        .expect("acquire")
        {
            Acquired::Held(lease) => QuietDrop::new(lease),
            Acquired::Refused(r) => panic!("free: {r}"),
        };
        // "lane-c.lock": a malformed record, which stays busy.
        std::fs::write(site.path().join("lane-c.lock"), "{").expect("plant");
        let each = [
            ("lane-a.lock", Request::new("one")),
            ("lane-a.lock.more", Request::new("two")),
            ("lane-b.lock", Request::new("three")),
            ("lane-c.lock", Request::new("four")),
            ("lane-d.lock", Request::new("five")),
            ("lane-d.lock", Request::new("six")),
        ];
        let got = gate::quietly(|| acquire_each(&site.dir, &each, &Options::process()))
            .expect("acquire each");
        assert_eq!(got.len(), 6, "one result per name");
        let mut got = got.into_iter();
        let held = |a: Option<Acquired>, what: &str| match a {
            Some(Acquired::Held(lease)) => QuietDrop::new(lease),
            Some(Acquired::Refused(r)) => panic!("{what} must be held, was refused: {r}"),
            None => panic!("{what}: no result"),
        };
        let refused = |a: Option<Acquired>, what: &str| match a {
            Some(Acquired::Refused(r)) => r,
            Some(Acquired::Held(l)) => panic!("{what} must be refused, got epoch {}", l.epoch()),
            None => panic!("{what}: no result"),
        };
        let a = held(got.next(), "a free resource");
        assert_eq!(a.epoch(), 6, "its epoch follows the five before");
        let more = held(got.next(), "a dead holder's resource");
        assert_eq!(
            more.epoch(),
            1,
            "its first epoch: a's epoch files are not its own"
        );
        let b = refused(got.next(), "a live lease's resource");
        assert_eq!(b.why, LiveWhy::GuardHeld, "its guard is held");
        let c = refused(got.next(), "a malformed record");
        assert!(matches!(c.why, LiveWhy::Malformed { .. }), "{:?}", c.why);
        let d = held(got.next(), "a new resource");
        assert_eq!(d.epoch(), 1, "first epoch");
        let again = refused(got.next(), "a name given twice");
        assert_eq!(again.why, LiveWhy::GuardHeld, "the second time");
        let names = site.names();
        assert!(
            !names.iter().any(|n| n.ends_with(".claim")),
            "a's garbage claim is cleared: {names:?}"
        );
        for (name, owner) in [
            ("lane-a.lock", "one"),
            ("lane-a.lock.more", "two"),
            ("lane-d.lock", "five"),
        ] {
            let raw = std::fs::read(site.path().join(name)).expect("record");
            let record = Record::parse(&raw).expect("parses");
            assert_eq!(
                record.owner.as_deref(),
                Some(owner),
                "{name} names its own request"
            );
        }
        let raw = std::fs::read(site.path().join("lane-b.lock")).expect("record");
        assert_eq!(
            Record::parse(&raw).expect("parses").owner.as_deref(),
            Some("live"),
            "the live lease's record is untouched"
        );
        drop((a, more, d, live));
    }

    #[test]
    fn a_bad_name_or_field_fails_before_any_guard_is_taken() {
        let site = Site::new();
        let long = "x".repeat(worklane_lease::MAX_LOCK_NAME + 1);
        let each = [
            ("lane-a.lock", Request::new("one")),
            (long.as_str(), Request::new("two")),
        ];
        let error = acquire_each(&site.dir, &each, &Options::process())
            .expect_err("a name too long fails the call");
        assert!(error.to_string().contains(&long), "{error}");
        let reserved = [("lane-a.lock", Request::new("one").field("pid", 1))];
        acquire_each(&site.dir, &reserved, &Options::process())
            .expect_err("a reserved field fails the call");
        assert!(
            site.names().is_empty(),
            "nothing written: {:?}",
            site.names()
        );
    }
}

mod claims {
    //! A claim found under the guard belongs to a taker that no longer holds it. Garbage, a
    //! claim for a record that is gone, and a claim whose taker declared it held the guard
    //! are cleared; nothing of the kind may block the lock forever.
    use super::*;

    fn claim_files(site: &Site) -> Vec<String> {
        site.names()
            .into_iter()
            .filter(|n| n.ends_with(".claim"))
            .collect()
    }

    #[test]
    fn garbage_claims_never_block() {
        let site = Site::new();
        let garbage = site.path().join(format!("{LOCK}.0123456789abcdef.claim"));
        std::fs::write(&garbage, "garbage\n").expect("plant garbage");
        let lease = site.held("taker", &Options::process());
        assert!(
            claim_files(&site).is_empty(),
            "garbage claim cleared: {:?}",
            site.names()
        );
        drop(lease);
        // Garbage named exactly after the record now there: still not a taker's.
        let stale = dead_record("dead");
        site.write_record(&stale);
        std::fs::write(site.path().join(claim_name(LOCK, &stale.to_bytes())), "{").expect("plant");
        let lease = site.held("taker", &Options::process());
        assert!(claim_files(&site).is_empty(), "{:?}", site.names());
        drop(lease);
    }

    #[test]
    fn a_claim_for_another_record_is_cleared_even_if_its_taker_runs() {
        let site = Site::new();
        let me = Record {
            holder: Recorded::new(
                ProcessIdentity::of_self().expect("me"),
                Place::current().expect("place").clone(),
            ),
            ..Record::default()
        };
        // No record at all, and a claim by a live process: it cannot be taking over anything.
        let claim = site.path().join(claim_name(LOCK, b"a record that is gone"));
        std::fs::write(&claim, me.to_bytes()).expect("plant");
        let lease = site.held("taker", &Options::process());
        assert!(!claim.exists(), "a claim for no record is cleared");
        drop(lease);
        // A record whose hash is not the claim's: likewise.
        let stale = dead_record("dead");
        site.write_record(&stale);
        std::fs::write(&claim, me.to_bytes()).expect("plant");
        let lease = site.held("taker", &Options::process());
        assert!(!claim.exists(), "a claim for another record is cleared");
        drop(lease);
    }

    #[test]
    fn a_declaring_claim_is_cleared_even_if_its_taker_runs() {
        let site = Site::new();
        let stale = dead_record("dead");
        site.write_record(&stale);
        let me = Record {
            holder: Recorded::new(
                ProcessIdentity::of_self().expect("me"),
                Place::current().expect("place").clone(),
            ),
            holds_guard: Some(true),
            ..Record::default()
        };
        let claim = site.path().join(claim_name(LOCK, &stale.to_bytes()));
        std::fs::write(&claim, me.to_bytes()).expect("plant");
        let lease = site.held("taker", &Options::process());
        assert!(
            !claim.exists(),
            "its taker held the guard and no longer does"
        );
        drop(lease);
    }

    #[test]
    fn a_claim_that_is_not_a_file_is_skipped() {
        let site = Site::new();
        let stale = dead_record("dead");
        site.write_record(&stale);
        let odd = site.path().join(format!("{LOCK}.fedcba9876543210.claim"));
        std::fs::create_dir(&odd).expect("a directory named like a claim");
        let lease = site.held("taker", &Options::process());
        assert!(odd.is_dir(), "left for the operator (slots reports it)");
        drop(lease);
        let again = site.held("again", &Options::process());
        drop(again);
    }

    #[test]
    fn a_fifo_named_like_a_claim_is_unlinked_and_a_directory_at_our_claim_is_no_obstacle() {
        let site = Site::new();
        let stale = dead_record("dead");
        site.write_record(&stale);
        let fifo = site.path().join(format!("{LOCK}.0123456789abcdef.claim"));
        let made = Command::new("mkfifo")
            .arg(&fifo)
            .status_gated()
            .expect("mkfifo");
        assert!(made.success());
        // A directory exactly where our claim for this stale record goes.
        let ours = site.path().join(claim_name(LOCK, &stale.to_bytes()));
        std::fs::create_dir(&ours).expect("mkdir");
        let lease = site.held("taker", &Options::process());
        assert_eq!(
            site.record().expect("ours").owner.as_deref(),
            Some("taker"),
            "taken over without a claim of its own"
        );
        assert!(
            !fifo.exists(),
            "a FIFO is never a claim: unlinked under the guard"
        );
        assert!(
            ours.is_dir(),
            "a directory cannot be unlinked: left for the operator"
        );
        drop(lease);
    }

    #[test]
    fn an_oversized_or_odd_record_is_a_refusal_not_an_error() {
        let site = Site::new();
        std::fs::write(site.path().join(LOCK), vec![b' '; 70 * 1024]).expect("big");
        let why = site.refused("taker", &Options::process()).why;
        assert!(matches!(why, LiveWhy::Malformed { .. }), "{why:?}");
        std::fs::remove_file(site.path().join(LOCK)).expect("rm");
        std::fs::create_dir(site.path().join(LOCK)).expect("dir");
        let why = site.refused("taker", &Options::process()).why;
        assert!(matches!(why, LiveWhy::Malformed { .. }), "{why:?}");
    }
}

mod takeover {
    use super::*;

    #[test]
    fn a_sigkilled_holder_is_taken_over_at_once() {
        let site = Site::new();
        let mut holder = Holder::spawn(&site, "victim", &[]);
        let first = holder.expect_held();
        site.refused("contender", &Options::process());
        holder.kill();
        let lease = site.held("contender", &Options::process());
        assert!(lease.epoch() > first, "a takeover gets a larger epoch");
        assert_eq!(
            site.record().expect("record").owner.as_deref(),
            Some("contender")
        );
        assert!(
            !site.names().iter().any(|n| n.ends_with(".claim")),
            "no claim left: {:?}",
            site.names()
        );
    }

    #[test]
    fn twelve_processes_race_over_a_stale_record_and_one_wins() {
        let site = Site::new();
        site.write_record(&dead_record("dead"));
        let mut racers: Vec<Holder> = (0..12)
            .map(|i| Holder::spawn(&site, &format!("racer-{i}"), &["--wait-start"]))
            .collect();
        for r in &mut racers {
            writeln!(r.stdin.as_mut().expect("stdin"), "go").expect("start");
        }
        let lines: Vec<String> = racers.iter_mut().map(Holder::line).collect();
        let winners: Vec<usize> = (0..12).filter(|&i| lines[i].starts_with("held")).collect();
        assert_eq!(winners.len(), 1, "exactly one winner: {lines:?}");
        assert!(
            lines.iter().filter(|l| l.starts_with("refused")).count() == 11,
            "everyone else refused: {lines:?}"
        );
        let record = site.record().expect("record");
        assert_eq!(
            record.owner.as_deref(),
            Some(format!("racer-{}", winners[0]).as_str()),
            "the record names the winner"
        );
        assert_eq!(record.pid(), Some(racers[winners[0]].child.id()));
        for r in racers {
            r.finish();
        }
        assert_eq!(site.record(), None, "the winner released on exit");
    }

    #[test]
    fn a_dead_claim_is_cleared_and_a_live_one_respected() {
        let site = Site::new();
        let stale = dead_record("dead");
        site.write_record(&stale);
        let claim = site.path().join(claim_name(LOCK, &stale.to_bytes()));

        // A claim by a live taker (this process) that no longer holds the guard: respected.
        let me = Record {
            holder: Recorded::new(
                ProcessIdentity::of_self().expect("me"),
                Place::current().expect("place").clone(),
            ),
            ..Record::default()
        };
        std::fs::write(&claim, me.to_bytes()).expect("plant a live claim");
        let refusal = site.refused("contender", &Options::process());
        assert!(
            matches!(refusal.why, LiveWhy::TakeoverInProgress { claimant: Some(pid), .. } if pid == std::process::id()),
            "{:?}",
            refusal.why
        );
        assert!(claim.exists(), "a live claim is kept");

        // The same claim by a dead taker: cleared, and the takeover goes through.
        std::fs::write(&claim, dead_record("dead taker").to_bytes()).expect("plant a dead claim");
        let lease = site.held("contender", &Options::process());
        assert!(!claim.exists(), "the dead claim is cleared");
        assert_eq!(site.names(), [LOCK.to_owned(), format!("{LOCK}.epoch.1")]);
        drop(lease);
    }

    const STEPS: &[&str] = &[
        "guard-taken",
        "record-inspected",
        "claim-taken",
        "stale-removed",
        "epoch-advanced",
        "published",
    ];

    #[test]
    fn a_taker_killed_at_each_step_leaves_a_state_the_next_recovers() {
        for step in STEPS {
            let site = Site::new();
            site.write_record(&dead_record("dead"));
            let mut taker = Holder::spawn(&site, "crasher", &["--pause-at", step]);
            assert_eq!(
                taker.line(),
                format!("at {step}"),
                "the taker reached {step}"
            );
            taker.kill();
            let lease = site.held("recoverer", &Options::process());
            let record = site.record().expect("record");
            assert_eq!(
                record.owner.as_deref(),
                Some("recoverer"),
                "after a crash at {step}"
            );
            let names = site.names();
            assert_eq!(
                names.len(),
                2,
                "nothing stranded after a crash at {step}: {names:?}"
            );
            assert_eq!(names[0], LOCK, "{names:?}");
            assert!(
                worklane_lease::parse_epoch_name(LOCK, &names[1]) == Some(lease.epoch()),
                "one epoch file, carrying the lease's epoch: {names:?}"
            );
            drop(lease);
        }
    }

    #[test]
    fn a_holder_killed_while_acquiring_a_free_lock_is_recovered() {
        for step in [
            "guard-taken",
            "record-inspected",
            "epoch-advanced",
            "published",
        ] {
            let site = Site::new();
            let mut taker = Holder::spawn(&site, "crasher", &["--pause-at", step]);
            assert_eq!(taker.line(), format!("at {step}"));
            taker.kill();
            let lease = site.held("recoverer", &Options::process());
            assert_eq!(
                site.record().expect("record").owner.as_deref(),
                Some("recoverer")
            );
            drop(lease);
        }
    }

    /// Runs a takeover of a dead record that calls `outsider` (with the slot directory) once
    /// its claim is published, and returns what acquisition said.
    fn takeover_with_outsider(
        site: &Site,
        outsider: impl Fn(&Path) + Send + Sync + 'static,
    ) -> Result<Acquired, worklane_lease::acquire::Error> {
        site.write_record(&dead_record("dead"));
        let dir = site.path().to_owned();
        let options = Options::process().with_hook(move |step| {
            if step == worklane_lease::Step::ClaimTaken {
                outsider(&dir);
            }
            worklane_lease::Control::Continue
        });
        gate::quietly(|| acquire(&site.dir, LOCK, &Request::new("taker"), &options))
    }

    #[test]
    fn a_record_changed_after_the_claim_is_kept_and_the_claim_withdrawn() {
        let site = Site::new();
        let got = takeover_with_outsider(&site, |dir| {
            std::fs::write(dir.join(LOCK), b"{\"owner\":\"outsider\"}\n").expect("outsider writes");
        })
        .expect("acquire");
        let Acquired::Refused(refusal) = got else {
            panic!("a record that changed since it was judged must not be taken over");
        };
        assert_eq!(refusal.why, LiveWhy::Changed, "{refusal}");
        assert_eq!(
            std::fs::read(site.path().join(LOCK)).expect("kept"),
            b"{\"owner\":\"outsider\"}\n",
            "the changed record is never removed"
        );
        assert_eq!(
            site.names(),
            [LOCK],
            "the claim is withdrawn, no epoch spent"
        );
    }

    #[test]
    fn a_record_removed_after_the_claim_is_not_taken_by_the_claimant() {
        let site = Site::new();
        let got = takeover_with_outsider(&site, |dir| {
            std::fs::remove_file(dir.join(LOCK)).expect("outsider removes");
        })
        .expect("acquire");
        let Acquired::Refused(refusal) = got else {
            panic!("the recheck must refuse when the record is no longer the stale one");
        };
        assert_eq!(refusal.why, LiveWhy::Changed, "{refusal}");
        assert!(
            site.names().is_empty(),
            "nothing published, claim withdrawn: {:?}",
            site.names()
        );
    }

    #[test]
    fn a_takeover_that_fails_after_its_claim_withdraws_the_claim() {
        let site = Site::new();
        // An epoch file appearing behind the taker's back makes publishing fail after the
        // stale record is gone: an error, not a crash, so the live taker must clean up.
        let err = takeover_with_outsider(&site, |dir| {
            std::fs::write(dir.join(format!("{LOCK}.epoch.1")), b"").expect("outsider epoch");
        })
        .expect_err("the epoch cannot be advanced");
        assert!(
            matches!(err, worklane_lease::acquire::Error::Epoch { .. }),
            "{err:?}"
        );
        assert!(
            !site.names().iter().any(|n| n.ends_with(".claim")),
            "a failed takeover withdraws its claim: {:?}",
            site.names()
        );
        let lease = site.held("taker", &Options::process());
        assert_eq!(
            lease.epoch(),
            2,
            "the same process can take it next, past the stray epoch"
        );
        drop(lease);
    }
}

mod interleaving {
    use super::*;
    use std::sync::mpsc;
    use worklane_lease::{Control, Step};

    /// Contender A stops at `step` (holding the guard), B and C try meanwhile, then A goes on.
    fn three_contenders(step: Step, options: &Options, stale: bool) {
        let site = Arc::new(Site::new());
        if stale {
            site.write_record(&dead_record("dead"));
        }
        let (reached_tx, reached_rx) = mpsc::channel();
        let (go_tx, go_rx) = mpsc::channel::<()>();
        let go_rx = std::sync::Mutex::new(go_rx);
        let a_options = options.clone().with_hook(move |s| {
            if s == step {
                reached_tx.send(()).expect("report the step");
                go_rx.lock().expect("lock").recv().expect("wait for go");
            }
            Control::Continue
        });
        let a_site = Arc::clone(&site);
        // Not quiet: B and C (quiet) run while A waits in its hook.
        let a = std::thread::spawn(move || {
            match acquire(&a_site.dir, LOCK, &Request::new("A"), &a_options)
                .expect("acquire must not fail")
            {
                Acquired::Held(lease) => QuietDrop::new(lease),
                Acquired::Refused(r) => panic!("A must win: {r}"),
            }
        });
        // Bounded: an acquisition that never asked its hook fails here rather than hanging.
        reached_rx
            .recv_timeout(Duration::from_secs(5))
            .expect("A reached the step within 5 s");
        for name in ["B", "C"] {
            let refusal = site.refused(name, options);
            assert_eq!(
                refusal.why,
                LiveWhy::GuardHeld,
                "{name} meets A's guard at {step:?}"
            );
        }
        go_tx.send(()).expect("let A go");
        let lease = a.join().expect("A's thread");
        let record = site.record().expect("record");
        assert_eq!(
            record.owner.as_deref(),
            Some("A"),
            "the record names the one holder"
        );
        assert_eq!(record.pid(), Some(std::process::id()));
        for name in ["B", "C"] {
            site.refused(name, options);
        }
        drop(lease);
    }

    #[test]
    fn at_record_inspected() {
        three_contenders(Step::RecordInspected, &Options::process(), true);
        three_contenders(Step::RecordInspected, &Options::process(), false);
    }

    #[test]
    fn at_claim_taken() {
        three_contenders(Step::ClaimTaken, &Options::process(), true);
    }

    #[test]
    fn at_record_inspected_under_ttl() {
        // Under TTL liveness the guard is held only while changing, and contenders retry it
        // briefly: A stopped mid-change still excludes them.
        let clock = ManualClock::at(1_000_000);
        three_contenders(Step::RecordInspected, &ttl_options(1000, &clock), false);
    }
}

mod ttl {
    use super::*;

    const TTL: u64 = 60_000;

    #[test]
    fn both_sides_of_the_boundary() {
        for (age, reclaimed) in [(TTL - 1, false), (TTL, false), (TTL + 1, true)] {
            let site = Site::new();
            let clock = ManualClock::at(1_000_000);
            let holder = site.held("holder", &ttl_options(TTL, &clock));
            clock.advance(age);
            match site.acquire("contender", &ttl_options(TTL, &clock)) {
                Acquired::Held(lease) => {
                    assert!(reclaimed, "age {age} must still be held");
                    assert_eq!(
                        site.record().expect("r").owner.as_deref(),
                        Some("contender")
                    );
                    drop(lease);
                }
                Acquired::Refused(r) => {
                    assert!(!reclaimed, "age {age} must be reclaimed, refused: {r}");
                    assert_eq!(
                        r.why,
                        LiveWhy::Fresh {
                            age_ms: age,
                            ttl_ms: TTL
                        }
                    );
                }
            }
            drop(holder);
        }
    }

    #[test]
    fn an_odd_role_lease_is_a_refusal_under_ttl_too() {
        // A role lease judged by TTL: a directory, a symbolic link or an oversized file at the
        // record's name is busy with its reason, like a record that does not parse, never an
        // error (that was exit 71 for `worklane lease run`) and never stale.
        let clock = ManualClock::at(1_000_000);
        let options = ttl_options(TTL, &clock);
        let site = Site::new();
        let lock = site.path().join(LOCK);
        let plants: [(&str, &dyn Fn()); 3] = [
            ("a directory", &|| {
                std::fs::create_dir(&lock).expect("mkdir")
            }),
            ("a symbolic link", &|| {
                std::os::unix::fs::symlink("elsewhere", &lock).expect("symlink")
            }),
            ("over 64 KiB", &|| {
                std::fs::write(&lock, vec![b' '; 70 * 1024]).expect("write")
            }),
        ];
        for (what, plant) in plants {
            plant();
            let refusal = match site.acquire("contender", &options) {
                Acquired::Refused(r) => r,
                Acquired::Held(lease) => panic!("{what}: taken, epoch {}", lease.epoch()),
            };
            assert!(
                matches!(&refusal.why, LiveWhy::Malformed { detail } if detail.contains(LOCK)),
                "{what}: busy naming the file: {:?}",
                refusal.why
            );
            clock.advance(10 * TTL);
            assert!(
                matches!(site.acquire("later", &options), Acquired::Refused(_)),
                "{what}: it never goes stale"
            );
            match std::fs::symlink_metadata(&lock)
                .expect("left alone")
                .is_dir()
            {
                true => std::fs::remove_dir(&lock).expect("rmdir"),
                false => std::fs::remove_file(&lock).expect("rm"),
            }
        }
    }

    #[test]
    fn a_pulse_keeps_it_fresh() {
        let site = Site::new();
        let clock = ManualClock::at(0);
        let mut holder = site.held("holder", &ttl_options(TTL, &clock));
        clock.set(TTL);
        gate::quietly(|| holder.pulse()).expect("pulse");
        clock.set(2 * TTL);
        let refusal = site.refused("contender", &ttl_options(TTL, &clock));
        assert_eq!(
            refusal.why,
            LiveWhy::Fresh {
                age_ms: TTL,
                ttl_ms: TTL
            }
        );
        assert_eq!(refusal.holder.expect("holder").last_pulse, Some(TTL));
    }

    /// A pulse that cannot read its record, or take its guard, fails naming its lease (a
    /// directory a group member put at either name).
    #[test]
    fn a_pulse_that_cannot_read_or_take_its_guard_names_its_lease() {
        let site = Site::new();
        let clock = ManualClock::at(0);
        let mut holder = site.held("holder", &ttl_options(TTL, &clock));
        std::fs::remove_file(site.path().join(LOCK)).expect("rm the record");
        std::fs::create_dir(site.path().join(LOCK)).expect("a directory at its name");
        match gate::quietly(|| holder.pulse()) {
            Err(held::Error::Read { resource, .. }) => assert_eq!(resource, LOCK),
            other => panic!("a record that cannot be read: {other:?}"),
        }
        std::fs::remove_dir(site.path().join(LOCK)).expect("rmdir");
        let guard = site.path().join(format!(".{LOCK}.flock"));
        std::fs::remove_file(&guard).expect("rm the guard");
        std::fs::create_dir(&guard).expect("a directory at the guard's name");
        match gate::quietly(|| holder.pulse()) {
            Err(held::Error::Guard { resource, .. }) => assert_eq!(resource, LOCK),
            other => panic!("a guard that cannot be taken: {other:?}"),
        }
        std::fs::remove_dir(&guard).expect("rmdir");
    }

    #[test]
    fn a_late_release_never_deletes_a_successors_record() {
        let site = Site::new();
        let clock = ManualClock::at(0);
        let mut late = site.held("late", &ttl_options(TTL, &clock));
        clock.set(TTL + 1);
        let successor = site.held("successor", &ttl_options(TTL, &clock));
        assert!(
            successor.epoch() > late.epoch(),
            "the successor's epoch is larger"
        );
        let lost = gate::quietly(|| late.pulse()).expect_err("the late holder lost it");
        assert!(matches!(lost, held::Error::LeaseLost { .. }), "{lost:?}");
        assert!(
            lost.to_string().contains("successor"),
            "names the new holder: {lost}"
        );
        late.end(Lease::release)
            .expect("a late release is not an error");
        assert_eq!(
            site.record().expect("successor's record").owner.as_deref(),
            Some("successor"),
            "the successor's record survives the late release"
        );
        drop(successor);
    }

    #[test]
    fn a_late_release_or_drop_without_a_pulse_keeps_the_successors_record() {
        let site = Site::new();
        let clock = ManualClock::at(0);
        // The late holder never learns it lost: its release goes straight to the file.
        let late = site.held("late", &ttl_options(TTL, &clock));
        clock.set(TTL + 1);
        let successor = site.held("successor", &ttl_options(TTL, &clock));
        late.end(Lease::release)
            .expect("a late release is not an error");
        assert_eq!(
            site.record().expect("successor's record").owner.as_deref(),
            Some("successor"),
            "a late release removes only its own bytes"
        );
        clock.set(2 * TTL + 2);
        let next = site.held("next", &ttl_options(TTL, &clock));
        drop(successor);
        assert_eq!(
            site.record().expect("next's record").owner.as_deref(),
            Some("next"),
            "a late drop removes only its own bytes"
        );
        drop(next);
    }

    #[test]
    fn a_ttl_claim_is_respected_within_the_ttl_and_cleared_after() {
        let site = Site::new();
        let now = 10 * TTL;
        let clock = ManualClock::at(now);
        let me = Recorded::new(
            ProcessIdentity::of_self().expect("me"),
            Place::current().expect("place").clone(),
        );
        let stale = Record {
            holder: me.clone(),
            owner: Some("stale".into()),
            last_pulse: Some(now - TTL - 1),
            ttl_ms: Some(TTL),
            ..Record::default()
        };
        site.write_record(&stale);
        // A taker that stopped mid-takeover: alive (this process), so only its age counts.
        let claim = site.path().join(claim_name(LOCK, &stale.to_bytes()));
        let taker = Record {
            holder: me,
            last_pulse: Some(now),
            ..Record::default()
        };
        std::fs::write(&claim, taker.to_bytes()).expect("plant the claim");
        clock.set(now + TTL);
        let refusal = site.refused("contender", &ttl_options(TTL, &clock));
        assert!(
            matches!(refusal.why, LiveWhy::TakeoverInProgress { .. }),
            "a claim pulsed within the TTL is respected: {:?}",
            refusal.why
        );
        assert!(claim.exists(), "and kept");
        clock.set(now + TTL + 1);
        let lease = site.held("contender", &ttl_options(TTL, &clock));
        assert!(!claim.exists(), "a claim older than the TTL is cleared");
        assert_eq!(
            site.record().expect("ours").owner.as_deref(),
            Some("contender")
        );
        drop(lease);
    }

    #[test]
    fn ensure_held_reverifies_only_after_half_the_ttl() {
        let site = Site::new();
        let clock = ManualClock::at(0);
        let mut holder = site.held("holder", &ttl_options(TTL, &clock));
        // Someone outside the protocol replaces the record: only a re-verification notices.
        let mut other = site.record().expect("record");
        other.owner = Some("intruder".into());
        site.write_record(&other);
        clock.set(TTL / 2);
        gate::quietly(|| holder.ensure_held()).expect("within TTL/2 nothing is re-read");
        clock.set(TTL / 2 + 1);
        let err = gate::quietly(|| holder.ensure_held())
            .expect_err("past TTL/2 the record is re-verified");
        assert!(matches!(err, held::Error::LeaseLost { .. }), "{err:?}");
        assert!(
            matches!(
                gate::quietly(|| holder.ensure_held()),
                Err(held::Error::LeaseLost { .. })
            ),
            "a lost lease stays lost"
        );
    }

    #[test]
    fn two_roles_coexist_and_one_role_refuses_a_second_holder() {
        let site = Site::new();
        let clock = ManualClock::at(0);
        let options = ttl_options(TTL, &clock);
        let role = |r: &str| Request::new("orchestrator").field("role", r);
        let lease = |name: &str, r: &str| {
            gate::quietly(|| acquire(&site.dir, name, &role(r), &options)).expect("acquire")
        };
        let Acquired::Held(edge) = lease("role-host-edge.lease", "host-edge") else {
            panic!("host-edge is free")
        };
        let Acquired::Held(plane) = lease("role-container-plane.lease", "container-plane") else {
            panic!("a different role coexists")
        };
        let Acquired::Refused(refusal) = lease("role-container-plane.lease", "container-plane")
        else {
            panic!("the same role is refused")
        };
        let text = refusal.to_string();
        assert!(text.contains("role container-plane"), "{text}");
        assert!(
            text.contains(&format!("pid {}", std::process::id())),
            "{text}"
        );
        drop((edge, plane));
    }

    fn unshare() -> Command {
        let mut cmd = Command::new("unshare");
        cmd.args(["--pid", "--fork", "--mount-proc"])
            .arg(env!("CARGO_BIN_EXE_lease-holder"));
        cmd
    }

    fn clock_file(site: &Site, ms: u64) -> PathBuf {
        let path = site.path().join("clock");
        std::fs::write(&path, ms.to_string()).expect("write clock");
        path
    }

    #[test]
    fn a_fresh_lease_held_from_another_pid_namespace_is_held() {
        let site = Site::new();
        let clock = clock_file(&site, 1_000_000);
        let clock_arg = clock.to_str().expect("utf-8");
        let ttl = TTL.to_string();
        let mut inside = Holder::spawn_with(
            unshare(),
            &site,
            "contained",
            &["--ttl", &ttl, "--clock-file", clock_arg],
        );
        inside.expect_held();
        let record = site.record().expect("record");
        let ours = Place::current().expect("place").pidns;
        assert_ne!(
            record.holder.place.present().expect("place").pidns,
            ours,
            "the holder runs in another pid namespace"
        );
        let manual = ManualClock::at(1_000_000 + TTL);
        let refusal = site.refused("host", &ttl_options(TTL, &manual));
        assert!(
            matches!(refusal.why, LiveWhy::Fresh { .. }),
            "{:?}",
            refusal.why
        );
        manual.set(1_000_000 + TTL + 1);
        let lease = site.held("host", &ttl_options(TTL, &manual));
        assert_eq!(
            site.record().expect("r").owner.as_deref(),
            Some("host"),
            "stale: reclaimed"
        );
        drop(lease);
        inside.finish();
    }

    #[test]
    fn a_fresh_lease_seen_from_another_pid_namespace_is_held() {
        let site = Site::new();
        let clock = clock_file(&site, 1_000_000);
        let clock_arg = clock.to_str().expect("utf-8");
        let ttl = TTL.to_string();
        let manual = ManualClock::at(1_000_000);
        let lease = site.held("host", &ttl_options(TTL, &manual));
        std::fs::write(&clock, (1_000_000 + TTL).to_string()).expect("clock at the boundary");
        let mut inside = Holder::spawn_with(
            unshare(),
            &site,
            "contained",
            &["--ttl", &ttl, "--clock-file", clock_arg],
        );
        let line = inside.line();
        assert!(
            line.starts_with("refused"),
            "a contender in another namespace: {line}"
        );
        assert!(line.contains("within its TTL"), "refused as fresh: {line}");
        inside.finish();
        std::fs::write(&clock, (1_000_000 + TTL + 1).to_string()).expect("clock past TTL");
        let mut inside = Holder::spawn_with(
            unshare(),
            &site,
            "contained",
            &["--ttl", &ttl, "--clock-file", clock_arg],
        );
        inside.expect_held();
        inside.finish();
        drop(lease);
    }

    #[test]
    fn a_holder_stopped_past_its_ttl_learns_it_lost_and_never_overwrites() {
        let site = Site::new();
        let clock = clock_file(&site, 0);
        let clock_arg = clock.to_str().expect("utf-8");
        let ttl = TTL.to_string();
        let mut paused =
            Holder::spawn(&site, "paused", &["--ttl", &ttl, "--clock-file", clock_arg]);
        let first = paused.expect_held();
        assert_eq!(paused.send("pulse"), "ok", "a pulse while fresh");
        paused.signal(rustix::process::Signal::STOP);
        std::fs::write(&clock, (TTL + 1).to_string()).expect("time passes");
        let successor = site.held("successor", &ttl_options(TTL, &ManualClock::at(TTL + 1)));
        assert!(successor.epoch() > first);
        paused.signal(rustix::process::Signal::CONT);
        assert_eq!(
            paused.send("ensure"),
            "lost",
            "the next ensure_held reports the loss"
        );
        assert_eq!(paused.send("pulse"), "lost", "and a pulse never overwrites");
        assert_eq!(paused.send("release"), "ok", "its release is harmless");
        paused.finish();
        let record = site.record().expect("record");
        assert_eq!(
            record.owner.as_deref(),
            Some("successor"),
            "the successor still holds it"
        );
        assert_eq!(record.epoch, Some(successor.epoch()));
        drop(successor);
    }
}

mod epochs {
    use super::*;

    #[test]
    fn epochs_strictly_increase_across_release_takeover_and_crash() {
        let site = Site::new();
        let path = site.dir.file(LOCK).expect("valid");
        assert_eq!(current_epoch(&path).expect("epoch"), 0, "none yet");
        let mut seen = Vec::new();
        let lease = site.held("a", &Options::process());
        seen.push(lease.epoch());
        lease.end(Lease::release).expect("release");
        let lease = site.held("b", &Options::process());
        seen.push(lease.epoch());
        drop(lease);
        // A holder that dies holding it: taken over.
        let mut victim = Holder::spawn(&site, "victim", &[]);
        seen.push(victim.expect_held());
        victim.kill();
        let lease = site.held("c", &Options::process());
        seen.push(lease.epoch());
        drop(lease);
        // A taker that dies after advancing the epoch but before publishing.
        let mut crasher = Holder::spawn(&site, "crasher", &["--pause-at", "epoch-advanced"]);
        assert_eq!(crasher.line(), "at epoch-advanced");
        crasher.kill();
        let lease = site.held("d", &Options::process());
        seen.push(lease.epoch());
        assert!(
            seen.windows(2).all(|w| w[0] < w[1]),
            "strictly increasing: {seen:?}"
        );
        assert_eq!(
            current_epoch(&path).expect("epoch"),
            lease.epoch(),
            "persisted"
        );
    }
}

mod epoch_overflow {
    use super::*;

    #[test]
    fn the_longest_lock_name_still_takes_the_largest_epoch() {
        let site = Site::new();
        let longest = "a".repeat(worklane_lease::MAX_LOCK_NAME);
        std::fs::write(
            site.path()
                .join(format!("{longest}.epoch.{}", u64::MAX - 1)),
            b"",
        )
        .expect("plant the last epoch but one");
        let Acquired::Held(lease) = gate::quietly(|| {
            acquire(
                &site.dir,
                &longest,
                &Request::new("me"),
                &Options::process(),
            )
        })
        .expect("a 20-digit epoch marker fits beside the longest name") else {
            panic!("free");
        };
        assert_eq!(lease.epoch(), u64::MAX, "the last epoch there is");
        assert!(
            site.path()
                .join(format!("{longest}.epoch.{}", u64::MAX))
                .exists(),
            "its marker is written under the longest name: {:?}",
            site.names()
        );
        gate::quietly(|| lease.release()).expect("release");
    }

    #[test]
    fn older_epoch_files_are_tidied_when_the_epoch_advances() {
        let site = Site::new();
        for n in [3, 5, 7] {
            std::fs::write(site.path().join(format!("{LOCK}.epoch.{n}")), b"").expect("plant");
        }
        let lease = site.held("me", &Options::process());
        assert_eq!(lease.epoch(), 8, "the largest present, plus one");
        assert_eq!(
            site.names(),
            [LOCK.to_owned(), format!("{LOCK}.epoch.8")],
            "only the current epoch file is left"
        );
        drop(lease);
    }

    #[test]
    fn an_epoch_that_cannot_grow_fails_the_acquisition() {
        let site = Site::new();
        std::fs::write(site.path().join(format!("{LOCK}.epoch.{}", u64::MAX)), b"").expect("max");
        let err = acquire(&site.dir, LOCK, &Request::new("me"), &Options::process())
            .expect_err("no epoch beyond u64::MAX");
        let text = err.to_string();
        assert!(text.contains("largest"), "says why: {text}");
        assert!(site.record().is_none(), "nothing published");
        std::fs::write(
            site.path().join(format!("{LOCK}.epoch.{}", u64::MAX - 1)),
            b"",
        )
        .expect("one less");
        std::fs::remove_file(site.path().join(format!("{LOCK}.epoch.{}", u64::MAX))).expect("rm");
        let lease = site.held("me", &Options::process());
        assert_eq!(
            lease.epoch(),
            u64::MAX,
            "the last epoch there is is still handed out"
        );
        drop(lease);
        let err = acquire(&site.dir, LOCK, &Request::new("me"), &Options::process())
            .expect_err("and after it, none");
        assert!(err.to_string().contains("largest"), "{err}");
    }
}

mod stress {
    use super::*;

    #[test]
    fn sixteen_processes_never_own_it_twice() {
        let site = Site::new();
        let cycles = 100;
        let children: Vec<Child> = (0..16)
            .map(|i| {
                Command::new(env!("CARGO_BIN_EXE_lease-holder"))
                    .arg(site.path())
                    .args([LOCK, &format!("w{i}"), "--cycles", &cycles.to_string()])
                    .stdout(Stdio::piped())
                    .spawn_gated()
                    .expect("spawn")
            })
            .collect();
        for c in children {
            let out = c.wait_with_output().expect("wait");
            let text = String::from_utf8_lossy(&out.stdout);
            assert!(out.status.success(), "a worker failed: {text}");
            assert_eq!(text.trim(), "done", "no double ownership: {text}");
        }
        let count: u64 = std::fs::read_to_string(site.path().join("counter"))
            .expect("counter")
            .trim()
            .parse()
            .expect("number");
        assert_eq!(count, 16 * cycles, "every cycle counted exactly once");
    }
}

mod clock_steps {
    //! TTL leases survive a step of the wall clock: a pulse also carries the boot clock, and a
    //! contender on the same boot and time namespace judges its age by that clock.
    use super::*;
    use worklane_lease::{BootTime, Clock, Now, SystemClock};

    const TTL: u64 = 60_000;
    const HOUR: u64 = 3_600_000;
    const WALL: u64 = 1_800_000_000_000;
    const BOOT: u64 = 5_000_000;

    fn clock(wall: u64, boot: u64) -> ManualClock {
        ManualClock::at(wall).with_boot(boot)
    }

    #[test]
    fn a_holder_an_hour_behind_keeps_its_lease_to_the_millisecond() {
        let site = Site::new();
        let holder = site.held("holder", &ttl_options(TTL, &clock(WALL - HOUR, BOOT)));
        let record = site.record().expect("record");
        assert_eq!(
            record.pulse_boot.as_ref().map(|b| b.ms),
            Some(BOOT),
            "the pulse carries the boot clock"
        );
        let contender = clock(WALL, BOOT + TTL);
        let refusal = site.refused("contender", &ttl_options(TTL, &contender));
        assert!(
            matches!(refusal.why, LiveWhy::Fresh { age_ms: TTL, .. }),
            "aged by the boot clock, not the wall clock an hour apart: {:?}",
            refusal.why
        );
        contender.advance(1);
        let lease = site.held("contender", &ttl_options(TTL, &contender));
        assert_eq!(
            site.record().expect("r").owner.as_deref(),
            Some("contender")
        );
        drop((lease, holder));
    }

    #[test]
    fn a_contender_an_hour_ahead_does_not_steal_a_live_lease() {
        let site = Site::new();
        let _holder = site.held("holder", &ttl_options(TTL, &clock(WALL, BOOT)));
        let contender = clock(WALL + HOUR, BOOT + 1);
        let refusal = site.refused("contender", &ttl_options(TTL, &contender));
        assert!(
            matches!(refusal.why, LiveWhy::Fresh { age_ms: 1, .. }),
            "{:?}",
            refusal.why
        );
    }

    #[test]
    fn a_dead_holder_an_hour_ahead_is_reclaimed_after_its_ttl() {
        let site = Site::new();
        let holder = clock(WALL + HOUR, BOOT);
        let lease = site.held("holder", &ttl_options(TTL, &holder));
        std::mem::forget(lease); // it died without releasing
        let contender = clock(WALL, BOOT + TTL + 1);
        let lease = site.held("contender", &ttl_options(TTL, &contender));
        assert_eq!(
            site.record().expect("r").owner.as_deref(),
            Some("contender"),
            "not refused for an hour as a pulse from the future"
        );
        drop(lease);
    }

    #[test]
    fn a_pulse_from_another_boot_or_time_namespace_is_judged_by_the_wall_clock() {
        let here = Now::of(&clock(WALL, BOOT)).boot.expect("a boot reading");
        for (what, other) in [
            (
                "boot",
                BootTime {
                    boot: "another-boot".into(),
                    ..here.clone()
                },
            ),
            (
                "time namespace",
                BootTime {
                    timens: Some(here.timens.unwrap_or(0) + 1),
                    ..here.clone()
                },
            ),
        ] {
            let site = Site::new();
            let mut record = dead_record("elsewhere");
            record.last_pulse = Some(WALL);
            record.ttl_ms = Some(TTL);
            record.pulse_boot = Some(BootTime {
                ms: BOOT + 10 * HOUR,
                ..other
            });
            site.write_record(&record);
            let c = clock(WALL + TTL, BOOT);
            let refusal = site.refused("contender", &ttl_options(TTL, &c));
            assert!(
                matches!(refusal.why, LiveWhy::Fresh { age_ms: TTL, .. }),
                "{what}: the wall clock decides: {:?}",
                refusal.why
            );
            c.set(WALL + TTL + 1);
            drop(site.held("contender", &ttl_options(TTL, &c)));
        }
    }

    #[test]
    fn ensure_held_measures_the_gap_by_the_boot_clock() {
        let site = Site::new();
        let c = clock(WALL, BOOT);
        let mut lease = site.held("holder", &ttl_options(TTL, &c));
        let first = site.record().expect("r").last_pulse;
        c.set(WALL - HOUR); // the wall clock steps back an hour...
        c.set_boot(BOOT + TTL / 2 + 1); // ...while more than TTL/2 really passes
        lease.ensure_held().expect("still ours");
        assert_ne!(
            site.record().expect("r").last_pulse,
            first,
            "a gap over TTL/2 re-verifies with a pulse, whatever the wall clock says"
        );
    }

    /// Builds an `LD_PRELOAD` library that shifts `CLOCK_REALTIME` (and `gettimeofday`,
    /// `time`) by `$WORKLANE_TEST_SHIFT_S` seconds, leaving the boot clock alone.
    fn shift_library(site: &Site) -> PathBuf {
        let source = site.path().join("shift.c");
        std::fs::write(
            &source,
            r#"
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <sys/time.h>
#include <time.h>
static long shift(void) { const char *s = getenv("WORKLANE_TEST_SHIFT_S"); return s ? atol(s) : 0; }
int clock_gettime(clockid_t id, struct timespec *tp) {
    static int (*real)(clockid_t, struct timespec *);
    if (!real) real = (int (*)(clockid_t, struct timespec *))dlsym(RTLD_NEXT, "clock_gettime");
    int r = real(id, tp);
    if (r == 0 && (id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE)) tp->tv_sec += shift();
    return r;
}
int gettimeofday(struct timeval *tv, void *tz) {
    struct timespec ts;
    int r = clock_gettime(CLOCK_REALTIME, &ts);
    (void)tz;
    if (r == 0 && tv) { tv->tv_sec = ts.tv_sec; tv->tv_usec = ts.tv_nsec / 1000; }
    return r;
}
time_t time(time_t *t) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    if (t) *t = ts.tv_sec;
    return ts.tv_sec;
}
"#,
        )
        .expect("write the shim");
        let library = site.path().join("shift.so");
        let built = Command::new("cc")
            .args(["-shared", "-fPIC", "-O2", "-o"])
            .arg(&library)
            .arg(&source)
            .arg("-ldl")
            .output_gated()
            .expect("run cc (the C compiler Rust links with)");
        assert!(
            built.status.success(),
            "cc: {}",
            String::from_utf8_lossy(&built.stderr)
        );
        library
    }

    fn shifted(site: &Site, library: &Path, seconds: i64) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_lease-holder"));
        cmd.env("LD_PRELOAD", library)
            .env("WORKLANE_TEST_SHIFT_S", seconds.to_string());
        let _ = site;
        cmd
    }

    fn wall_now() -> u64 {
        SystemClock.now_ms()
    }

    #[test]
    fn a_real_holder_whose_clock_is_an_hour_behind_keeps_its_role() {
        let site = Site::new();
        let library = shift_library(&site);
        let mut holder = Holder::spawn_with(
            shifted(&site, &library, -3600),
            &site,
            "behind",
            &["--ttl", "60000"],
        );
        holder.expect_held();
        let pulse = site.record().expect("record").last_pulse.expect("a pulse");
        assert!(
            wall_now().saturating_sub(pulse) > 3_500_000,
            "the holder's realtime clock is shifted (its pulse is an hour old by ours)"
        );
        let refusal = acquire(
            &site.dir,
            LOCK,
            &Request::new("contender"),
            &Options::ttl(Duration::from_secs(60)),
        )
        .expect("acquire");
        assert!(
            matches!(&refusal, Acquired::Refused(r) if matches!(r.why, LiveWhy::Fresh { .. })),
            "a live lease is not taken because its holder's clock is behind: {refusal:?}"
        );
        holder.finish();
    }

    #[test]
    fn a_real_holder_an_hour_ahead_that_dies_is_reclaimed_after_its_ttl() {
        let site = Site::new();
        let library = shift_library(&site);
        let mut holder = Holder::spawn_with(
            shifted(&site, &library, 3600),
            &site,
            "ahead",
            &["--ttl", "300"],
        );
        holder.expect_held();
        let pulse = site.record().expect("record").last_pulse.expect("a pulse");
        assert!(
            pulse > wall_now() + 3_500_000,
            "its pulse is an hour ahead by our clock"
        );
        holder.kill();
        let options = Options::ttl(Duration::from_millis(300));
        let mut last = None;
        for _ in 0..200 {
            match acquire(&site.dir, LOCK, &Request::new("successor"), &options).expect("acquire") {
                Acquired::Held(lease) => {
                    drop(lease);
                    return;
                }
                Acquired::Refused(r) => last = Some(r.why),
            }
            std::thread::sleep(Duration::from_millis(25));
        }
        panic!("still refused 5 s after a 300 ms TTL: {last:?}");
    }
}

mod model {
    //! Model-based property tests: random sequences of acquisitions, pulses, releases, crashes
    //! at each step and the passing of time, run against the real core (real files, real
    //! guards, one `ManualClock`) and a small reference model. Never two holders, epochs
    //! strictly increase, and a dead holder's resource is free after one step.
    use super::*;
    use proptest::prelude::*;
    use worklane_lease::{Clock, Control, Step};

    const TTL: u64 = 1_000;
    const CONTENDERS: usize = 3;

    #[derive(Debug, Clone)]
    enum Op {
        Acquire(usize),
        Pulse(usize),
        Release(usize),
        Crash(usize, Step),
        Advance(u64),
    }

    fn steps() -> impl Strategy<Value = Step> {
        prop_oneof![
            Just(Step::GuardTaken),
            Just(Step::RecordInspected),
            Just(Step::ClaimTaken),
            Just(Step::StaleRemoved),
            Just(Step::EpochAdvanced),
            Just(Step::Published),
        ]
    }

    fn ops() -> impl Strategy<Value = Vec<Op>> {
        let c = 0..CONTENDERS;
        prop::collection::vec(
            prop_oneof![
                4 => c.clone().prop_map(Op::Acquire),
                2 => c.clone().prop_map(Op::Pulse),
                2 => c.clone().prop_map(Op::Release),
                2 => (c, steps()).prop_map(|(c, s)| Op::Crash(c, s)),
                3 => prop_oneof![Just(0u64), Just(TTL), Just(TTL + 1), 0..3 * TTL]
                    .prop_map(Op::Advance),
            ],
            1..40,
        )
    }

    /// What the model knows of the record on disk.
    #[derive(Debug, Clone, Copy, PartialEq)]
    enum Disk {
        Empty,
        /// A record whose last pulse was at `pulse` (boot clock); `owner` is the contender whose
        /// live lease wrote it, `None` for a crashed acquisition's record.
        Record {
            owner: Option<usize>,
            pulse: u64,
        },
    }

    fn options(clock: &ManualClock, process: bool, crash_at: Option<Step>) -> Options {
        let base = if process {
            Options::process()
        } else {
            Options::ttl(Duration::from_millis(TTL))
        };
        let options = base.clock(Arc::new(clock.clone()));
        match crash_at {
            Some(step) => options.with_hook(move |s| {
                if s == step {
                    Control::Crash
                } else {
                    Control::Continue
                }
            }),
            None => options,
        }
    }

    fn run(ops: &[Op], process: bool) -> Result<(), TestCaseError> {
        // Releases here must be seen at once by the next acquisition: no other test thread
        // may be between fork and exec meanwhile (see worklane-testkit's gate).
        let _quiet = worklane_testkit::gate::quiet();
        let site = Site::new();
        let clock = ManualClock::at(1_800_000_000_000).with_boot(1_000_000);
        let mut leases: Vec<Option<Lease>> = (0..CONTENDERS).map(|_| None).collect();
        let mut disk = Disk::Empty;
        let mut last_epoch = 0u64;
        let boot = || clock.boot_ms().expect("boot clock");
        for op in ops {
            let now = boot();
            // Under process liveness a record is live exactly while its writer's guard is
            // held, i.e. while its lease is alive; under TTL while its pulse is within the TTL.
            let live = match disk {
                Disk::Empty => false,
                Disk::Record { owner, pulse } => {
                    if process {
                        owner.is_some()
                    } else {
                        now - pulse <= TTL
                    }
                }
            };
            match op {
                Op::Acquire(c) | Op::Crash(c, _) => {
                    let crash_at = match op {
                        Op::Crash(_, step) => Some(*step),
                        _ => None,
                    };
                    let got = acquire(
                        &site.dir,
                        LOCK,
                        &Request::new(format!("c{c}")),
                        &options(&clock, process, crash_at),
                    );
                    let takeover = matches!(disk, Disk::Record { .. });
                    // Which steps this acquisition reaches: a live holder's guard is busy under
                    // process liveness; under TTL the record is read and judged first.
                    let reached = |step: Step| match step {
                        Step::GuardTaken | Step::RecordInspected => !(process && live),
                        Step::ClaimTaken | Step::StaleRemoved => takeover && !live,
                        Step::EpochAdvanced | Step::Published => !live,
                        _ => false,
                    };
                    match got {
                        Ok(Acquired::Held(lease)) => {
                            prop_assert!(!live, "{op:?}: acquired over a live holder ({disk:?})");
                            prop_assert!(crash_at.is_none_or(|s| !reached(s)), "{op:?}: no crash");
                            prop_assert!(lease.epoch() > last_epoch, "epochs strictly increase");
                            last_epoch = lease.epoch();
                            leases[*c] = Some(lease);
                            disk = Disk::Record {
                                owner: Some(*c),
                                pulse: now,
                            };
                        }
                        Ok(Acquired::Refused(r)) => {
                            prop_assert!(live, "{op:?}: refused though free ({disk:?}): {r}");
                            prop_assert!(crash_at.is_none_or(|s| !reached(s)), "{op:?}: no crash");
                        }
                        Err(worklane_lease::acquire::Error::Crashed(step)) => {
                            prop_assert_eq!(Some(step), crash_at);
                            prop_assert!(
                                reached(step),
                                "{:?}: crashed at a step it cannot reach",
                                op
                            );
                            disk = match step {
                                Step::GuardTaken | Step::RecordInspected | Step::ClaimTaken => disk,
                                Step::StaleRemoved | Step::EpochAdvanced => Disk::Empty,
                                _ => Disk::Record {
                                    owner: None,
                                    pulse: now,
                                },
                            };
                            if matches!(step, Step::EpochAdvanced | Step::Published) {
                                last_epoch = worklane_lease::current_epoch(
                                    &site.dir.file(LOCK).expect("valid"),
                                )
                                .expect("epoch");
                            }
                            if let (Disk::Record { owner: None, .. }, true) = (disk, process) {
                                // Process liveness: the crashed writer's guard is closed, so
                                // its record is dead at once: the next acquisition must win.
                                let next = acquire(
                                    &site.dir,
                                    LOCK,
                                    &Request::new("next"),
                                    &options(&clock, true, None),
                                )
                                .expect("acquire after a crash");
                                prop_assert!(
                                    matches!(next, Acquired::Held(_)),
                                    "free after one step: {next:?}"
                                );
                                if let Acquired::Held(l) = next {
                                    prop_assert!(l.epoch() > last_epoch);
                                    last_epoch = l.epoch();
                                    l.release().expect("release");
                                }
                                disk = Disk::Empty;
                            }
                        }
                        Err(e) => return Err(TestCaseError::fail(format!("{op:?}: {e}"))),
                    }
                }
                Op::Pulse(c) => {
                    let Some(lease) = leases[*c].as_mut() else {
                        continue;
                    };
                    let ours = matches!(disk, Disk::Record { owner: Some(o), .. } if o == *c);
                    match lease.pulse() {
                        Ok(()) => {
                            prop_assert!(ours, "c{c} pulsed a record that is not its own");
                            disk = Disk::Record {
                                owner: Some(*c),
                                pulse: now,
                            };
                        }
                        Err(held::Error::LeaseLost { .. }) => {
                            prop_assert!(!ours, "c{c} lost a record that is its own");
                            leases[*c] = None;
                        }
                        Err(e) => return Err(TestCaseError::fail(format!("pulse: {e}"))),
                    }
                }
                Op::Release(c) => {
                    let Some(lease) = leases[*c].take() else {
                        continue;
                    };
                    lease.release().expect("release never fails here");
                    if matches!(disk, Disk::Record { owner: Some(o), .. } if o == *c) {
                        disk = Disk::Empty;
                    }
                }
                Op::Advance(ms) => clock.advance(*ms),
            }
            // Never two holders: at most one lease's bytes are on disk, and it is the model's.
            let on_disk = site.record();
            let matching: Vec<usize> = (0..CONTENDERS)
                .filter(|&i| {
                    leases[i]
                        .as_ref()
                        .is_some_and(|l| Some(l.record()) == on_disk.as_ref())
                })
                .collect();
            prop_assert!(matching.len() <= 1, "two holders: {matching:?}");
            let expected = match disk {
                Disk::Record { owner: Some(o), .. } => vec![o],
                _ => vec![],
            };
            prop_assert_eq!(matching, expected, "after {:?}", op);
        }
        Ok(())
    }

    proptest! {
        // Shrinking a failure is bounded (5 s), so that a broken core fails the test rather
        // than outlasting every timeout while it looks for the smallest sequence.
        #![proptest_config(ProptestConfig {
            cases: 96,
            max_shrink_time: 5_000,
            ..ProptestConfig::default()
        })]

        #[test]
        fn ttl_leases_follow_the_model(ops in ops()) {
            run(&ops, false)?;
        }

        #[test]
        fn process_leases_follow_the_model(ops in ops()) {
            run(&ops, true)?;
        }
    }
}

mod retiring {
    //! `retire`: what a resource used once leaves is removed under its guard, nothing else.
    use super::*;
    use worklane_guard::reclaim::Removal;

    fn names(site: &Site) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(site.path())
            .expect("list")
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn its_record_epochs_claims_and_guard_go_and_nothing_else() {
        let _quiet = gate::quiet();
        let site = Site::new();
        let lease = site.held("once", &Options::process()).end(|l| l);
        for other in [
            format!("{LOCK}.bak"),
            format!("{LOCK}x"),
            format!("{LOCK}.0123456789abcdef.clam"),
            "agent-1.lock.epoch.1".to_owned(),
        ] {
            std::fs::write(site.path().join(other), b"").expect("plant");
        }
        std::fs::write(
            site.path().join(format!("{LOCK}.0123456789abcdef.claim")),
            b"{}",
        )
        .expect("claim");
        std::fs::write(site.path().join(format!("{LOCK}.epoch.7")), b"").expect("epoch");
        // Held: nothing goes.
        let before = names(&site);
        assert_eq!(
            worklane_lease::retire(&site.dir, LOCK).expect("retire"),
            Removal::Busy
        );
        assert_eq!(names(&site), before, "a held resource keeps every file");
        drop(lease);
        assert_eq!(
            worklane_lease::retire(&site.dir, LOCK).expect("retire"),
            Removal::Removed
        );
        assert_eq!(
            names(&site),
            [
                "agent-0.lock.0123456789abcdef.clam",
                "agent-0.lock.bak",
                "agent-0.lockx",
                "agent-1.lock.epoch.1",
            ],
            "its record, epoch files, claim and guard are gone; the rest stays"
        );
    }

    #[test]
    fn a_file_it_cannot_remove_keeps_the_guard() {
        let _quiet = gate::quiet();
        let site = Site::new();
        // A directory where an epoch file belongs: no unlink removes it.
        std::fs::create_dir(site.path().join(format!("{LOCK}.epoch.3"))).expect("dir");
        assert_eq!(
            worklane_lease::retire(&site.dir, LOCK).expect("retire"),
            Removal::Needed
        );
        assert!(
            site.path().join(format!(".{LOCK}.flock")).exists(),
            "the guard stays while a file of the resource does"
        );
    }
}

mod hand_over {
    //! A lease handed to another holder through its guard's descriptor: no moment in which a
    //! competing owner could take it, the epoch kept, the record naming the new holder.
    use super::*;
    use worklane_guard::Guard;
    use worklane_lease::adopt;

    #[test]
    fn a_handed_over_guard_is_adopted_with_its_epoch_and_no_gap() {
        let site = Site::new();
        let first = site
            .held("launcher", &Options::process())
            .end(|lease| lease);
        let epoch = first.epoch();
        let guard = first.hand_over().expect("process liveness holds its guard");
        // The descriptor as another process receives it: a close-on-exec copy of the same
        // open file. (A plain `dup` would be inherited across exec by any child another test
        // thread starts meanwhile, and would keep the lock for that child's whole life.)
        let copy = rustix::io::fcntl_dupfd_cloexec(&guard, 0).expect("dup");
        let received = Guard::from_received(copy, &site.dir, site.path(), LOCK)
            .expect("the copy holds the lock");
        gate::quietly(|| drop(guard));
        let refusal = site.refused("rival", &Options::process());
        assert_eq!(
            refusal.why,
            LiveWhy::GuardHeld,
            "no gap: the copy still holds it"
        );
        assert_eq!(
            site.record().expect("kept").owner.as_deref(),
            Some("launcher"),
            "handing over leaves the record"
        );
        const WALL: u64 = 1_800_000_000_123;
        let adopted = adopt(
            &site.dir,
            LOCK,
            received,
            &Request::new("driver").field("role", "dispatch"),
            &Options::process().clock(Arc::new(ManualClock::at(WALL))),
        )
        .expect("adopt");
        assert_eq!(adopted.epoch(), epoch, "a hand-over keeps the epoch");
        let record = site.record().expect("rewritten");
        assert_eq!(
            &record,
            adopted.record(),
            "the file holds what the lease says"
        );
        assert_eq!(record.owner.as_deref(), Some("driver"));
        assert_eq!(
            record.acquired_at,
            Some(worklane_lease::rfc3339_ms(WALL)),
            "adopted now"
        );
        assert_eq!(
            record.extra_str("role"),
            Some("dispatch"),
            "the adopter's fields"
        );
        assert_eq!(record.epoch, Some(epoch));
        assert_eq!(record.holds_guard, Some(true));
        assert_eq!(record.pid(), Some(std::process::id()));
        gate::quietly(|| adopted.release()).expect("release");
        assert_eq!(
            site.record(),
            None,
            "the adopter's release removes the record"
        );
        let next = site.held("next", &Options::process());
        assert!(
            next.epoch() > epoch,
            "the next acquisition advances the epoch"
        );
    }

    /// Adopts the lock's guard (handed over by a fresh holder) after `meddle` has changed the
    /// record or the epoch files, and returns the adopted epoch.
    fn adopted_epoch(meddle: impl FnOnce(&Site, u64)) -> u64 {
        let site = Site::new();
        let first = site.held("launcher", &Options::process()).end(|l| l);
        let epoch = first.epoch();
        let guard = first.hand_over().expect("held");
        meddle(&site, epoch);
        let adopted = adopt(
            &site.dir,
            LOCK,
            guard,
            &Request::new("driver"),
            &Options::process(),
        )
        .expect("adopt");
        let got = adopted.epoch();
        assert_eq!(site.record().and_then(|r| r.epoch), Some(got), "recorded");
        gate::quietly(|| adopted.release()).expect("release");
        got
    }

    #[test]
    fn adopting_trusts_the_records_epoch_only_where_the_epoch_files_agree() {
        let epoch_file = |site: &Site, n: u64| site.path().join(format!("{LOCK}.epoch.{n}"));
        assert_eq!(adopted_epoch(|_, _| {}), 1, "record and files agree");
        // The record claims an epoch whose file is not there: the files decide.
        let got = adopted_epoch(|site, epoch| {
            let mut record = site.record().expect("record");
            record.epoch = Some(epoch + 5);
            site.write_record(&record);
        });
        assert_eq!(got, 1, "the largest epoch file, not the record's claim");
        // A larger epoch file beside the record's (outside the protocol): the largest wins.
        let got = adopted_epoch(|site, epoch| {
            std::fs::write(epoch_file(site, epoch + 1), b"").expect("plant");
        });
        assert_eq!(got, 2, "the next epoch present: listed, the largest");
        // No epoch in the record, or no record: listed.
        let got = adopted_epoch(|site, epoch| {
            std::fs::rename(epoch_file(site, epoch), epoch_file(site, 9)).expect("rename");
            std::fs::remove_file(site.path().join(LOCK)).expect("remove record");
        });
        assert_eq!(got, 9, "no record: the largest epoch file");
        // The last epoch there is: the record's claim is checked without looking past it.
        let got = adopted_epoch(|site, epoch| {
            std::fs::rename(epoch_file(site, epoch), epoch_file(site, u64::MAX)).expect("rename");
            let mut record = site.record().expect("record");
            record.epoch = Some(u64::MAX);
            site.write_record(&record);
        });
        assert_eq!(got, u64::MAX, "the largest there is");
    }
}

mod holding {
    //! What a held lease shows and does beyond pulse and release: its accessors, annotations,
    //! a lost lease that stays lost, and a release that reports what it could not do.
    use super::*;
    use worklane_identity::Field;

    const TTL: u64 = 60_000;

    #[test]
    fn a_lease_shows_its_resource_and_guard() {
        let site = Site::new();
        let process = site.held("p", &Options::process());
        assert_eq!(process.resource(), LOCK, "the resource's file name");
        assert!(
            process.guard().is_some(),
            "process liveness holds the guard"
        );
        assert!(process.holds_guard_for_life(), "process liveness: for life");
        process.end(Lease::release).expect("release");
        let clock = ManualClock::at(0);
        let ttl = site.held("t", &ttl_options(TTL, &clock));
        assert_eq!(ttl.resource(), LOCK, "the resource's file name");
        assert!(
            ttl.guard().is_none(),
            "TTL liveness holds no guard between changes"
        );
        assert!(
            !ttl.holds_guard_for_life(),
            "TTL liveness: only while changing"
        );
    }

    #[test]
    fn options_show_their_liveness_in_debug_output() {
        let process = format!("{:?}", Options::process());
        assert!(
            process.contains("ForLife") && process.contains("ttl_ms: None"),
            "{process}"
        );
        assert!(process.contains("hooked: false"), "{process}");
        let ttl = format!(
            "{:?}",
            Options::ttl(Duration::from_millis(TTL))
                .with_hook(|_| worklane_lease::Control::Continue)
        );
        assert!(
            ttl.contains("WhileChanging") && ttl.contains("ttl_ms: Some(60000)"),
            "{ttl}"
        );
        assert!(ttl.contains("hooked: true"), "{ttl}");
    }

    #[test]
    fn a_process_lease_never_writes_pulse_fields() {
        let site = Site::new();
        let clock = ManualClock::at(1_000).with_boot(1_000);
        let options = Options::process().clock(Arc::new(clock.clone()));
        let mut lease = site.held("p", &options);
        let written = site.record().expect("record");
        clock.advance(10 * TTL);
        lease.ensure_held().expect("the held guard is the proof");
        assert_eq!(
            site.record().as_ref(),
            Some(&written),
            "ensure_held reads and writes nothing under process liveness"
        );
        lease.pulse().expect("a pulse is harmless");
        let pulsed = site.record().expect("record");
        assert_eq!(
            (pulsed.last_pulse, pulsed.ttl_ms, pulsed.pulse_boot.as_ref()),
            (None, None, None),
            "no TTL fields under process liveness"
        );
        assert_eq!(pulsed, written, "the record is unchanged");
    }

    fn fields(pairs: &[(&str, serde_json::Value)]) -> serde_json::Map<String, serde_json::Value> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), v.clone()))
            .collect()
    }

    #[test]
    fn annotate_adds_fields_without_a_pulse_and_refuses_core_fields() {
        for process in [true, false] {
            let site = Site::new();
            let clock = ManualClock::at(1_000);
            let options = match process {
                true => Options::process().clock(Arc::new(clock.clone())),
                false => ttl_options(TTL, &clock),
            };
            let mut lease = site.held("annotator", &options);
            let before = site.record().expect("record");
            clock.advance(TTL / 2);
            gate::quietly(|| lease.annotate(fields(&[("child", 42.into())])))
                .expect("annotate a held lease");
            let after = site.record().expect("record");
            assert_eq!(
                after.extra.get("child"),
                Some(&42.into()),
                "process {process}: the field is on disk"
            );
            assert_eq!(
                &after,
                lease.record(),
                "process {process}: as the lease says"
            );
            assert_eq!(
                after.last_pulse, before.last_pulse,
                "process {process}: an annotation is no pulse"
            );
            let err = gate::quietly(|| lease.annotate(fields(&[("lastPulse", 5.into())])))
                .expect_err("a core field is refused");
            assert!(
                matches!(&err, held::Error::ReservedField { field, .. } if field == "lastPulse"),
                "process {process}: {err:?}"
            );
            assert_eq!(site.record().as_ref(), Some(&after), "nothing written");
            gate::quietly(|| lease.pulse()).expect("the annotated record is still ours");
            assert_eq!(
                site.record().expect("record").extra.get("child"),
                Some(&42.into()),
                "process {process}: a pulse keeps the annotation"
            );
        }
    }

    #[test]
    fn a_lost_lease_stays_lost_even_if_its_bytes_come_back() {
        let site = Site::new();
        let clock = ManualClock::at(1_000);
        let mut lease = site.held("holder", &ttl_options(TTL, &clock));
        let ours = std::fs::read(site.path().join(LOCK)).expect("our bytes");
        // An intruder's record naming a pid but no owner.
        let intruder = Record {
            holder: Recorded::new(
                ProcessIdentity::of_self().expect("me"),
                Place::current().expect("place").clone(),
            ),
            ..Record::default()
        };
        site.write_record(&intruder);
        let named = format!("pid {} holds it now", std::process::id());
        let lost = gate::quietly(|| lease.pulse()).expect_err("the record is not ours");
        assert!(lost.to_string().contains(&named), "{lost}");
        let again = gate::quietly(|| lease.ensure_held()).expect_err("a lost lease stays lost");
        let held::Error::LeaseLost { now, .. } = &again else {
            panic!("lost, not {again:?}");
        };
        assert_eq!(
            now.as_deref(),
            Some(&intruder),
            "the error shows the record that stands now"
        );
        assert!(again.to_string().contains(&named), "{again}");
        std::fs::write(site.path().join(LOCK), &ours).expect("our bytes come back");
        let still = gate::quietly(|| lease.pulse()).expect_err("lost for good");
        assert!(matches!(still, held::Error::LeaseLost { .. }), "{still:?}");
        std::fs::remove_file(site.path().join(LOCK)).expect("rm");
        let gone = gate::quietly(|| lease.pulse()).expect_err("still lost");
        assert!(gone.to_string().contains("its record is gone"), "{gone}");
    }

    #[test]
    fn a_lost_process_lease_fails_ensure_held() {
        let site = Site::new();
        let mut lease = site.held("holder", &Options::process());
        let mut other = site.record().expect("record");
        other.owner = Some("intruder".into());
        site.write_record(&other);
        let lost = lease.pulse().expect_err("the record is not ours");
        assert!(lost.to_string().contains("(intruder)"), "{lost}");
        let again = lease
            .ensure_held()
            .expect_err("under process liveness too, a lost lease stays lost");
        assert!(matches!(again, held::Error::LeaseLost { .. }), "{again:?}");
    }

    #[test]
    fn a_release_that_cannot_take_the_guard_says_so() {
        let site = Site::new();
        let clock = ManualClock::at(1_000);
        let lease = site.held("holder", &ttl_options(TTL, &clock));
        let inspector = site
            .dir
            .file(LOCK)
            .expect("valid")
            .try_guard()
            .expect("take the guard")
            .expect("the guard is free between changes");
        let err = lease.end(Lease::release).expect_err("the guard stays busy");
        assert!(matches!(err, held::Error::Busy { .. }), "{err:?}");
        assert!(err.to_string().contains("retry"), "says what to do: {err}");
        gate::quietly(|| drop(inspector));
        assert_eq!(
            site.record().expect("kept").owner.as_deref(),
            Some("holder"),
            "an unverified release touches nothing"
        );
    }

    #[test]
    fn a_takeover_claim_names_its_taker_and_time() {
        let site = Site::new();
        let stale = dead_record("dead");
        site.write_record(&stale);
        const WALL: u64 = 1_800_000_000_000;
        let clock = ManualClock::at(WALL).with_boot(5_000);
        let options =
            Options::process()
                .clock(Arc::new(clock.clone()))
                .with_hook(|step| match step {
                    worklane_lease::Step::ClaimTaken => worklane_lease::Control::Crash,
                    _ => worklane_lease::Control::Continue,
                });
        let err = gate::quietly(|| acquire(&site.dir, LOCK, &Request::new("taker"), &options))
            .expect_err("stopped at the claim");
        assert!(
            matches!(
                err,
                worklane_lease::acquire::Error::Crashed(worklane_lease::Step::ClaimTaken)
            ),
            "{err:?}"
        );
        let raw = std::fs::read(site.path().join(claim_name(LOCK, &stale.to_bytes())))
            .expect("the claim stays after a crash");
        let claim = Record::parse(&raw).expect("a claim is a record");
        assert_eq!(claim.pid(), Some(std::process::id()), "the taker's pid");
        assert!(
            matches!(claim.holder.place, Field::Present(_)),
            "the taker's place"
        );
        assert!(
            matches!(claim.holder.identity, Field::Present(_)),
            "the taker's identity"
        );
        assert_eq!(claim.owner.as_deref(), Some("taker"), "the taker's owner");
        assert_eq!(
            claim.acquired_at,
            Some(worklane_lease::rfc3339_ms(WALL)),
            "when it claimed"
        );
        assert_eq!(claim.last_pulse, Some(WALL), "its pulse, for TTL judges");
        assert_eq!(
            claim.pulse_boot.map(|b| b.ms),
            Some(5_000),
            "and the boot clock"
        );
        assert_eq!(claim.holds_guard, Some(true), "every taker holds the guard");
        let lease = site.held("next", &Options::process());
        assert_eq!(site.names(), [LOCK.to_owned(), format!("{LOCK}.epoch.1")]);
        drop(lease);
    }

    #[test]
    fn a_child_forked_without_exec_records_its_own_pid() {
        let site = Site::new();
        let out = Command::new(env!("CARGO_BIN_EXE_lease-holder"))
            .arg(site.path())
            .args([LOCK, "forker", "--fork-acquire"])
            .stdin(Stdio::null())
            .output_gated()
            .expect("run the holder");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "the holder must fork: {text}");
        let words: Vec<&str> = text.split_whitespace().collect();
        let ["forked", recorded, own] = words.as_slice() else {
            panic!("forked RECORD_PID CHILD_PID: {text:?}");
        };
        assert_eq!(
            recorded, own,
            "the child's record names the child, not its parent's cached identity"
        );
        assert_eq!(site.record(), None, "both released");
    }
}

mod journal {
    //! The lease's own events, from real acquisitions: a takeover of a SIGKILLed holder, and a
    //! role lease's taking, refusal and loss.
    use super::*;
    use worklane_journal::{Entry, Event};

    fn of_kind(site: &Site, kind: &str) -> Vec<Event> {
        let batch = worklane_journal::read(&site.dir).expect("read the journal");
        assert_eq!(batch.skipped, 0);
        batch
            .entries
            .into_iter()
            .filter(|e: &Entry| e.event.kind() == kind)
            .map(|e| e.event)
            .collect()
    }

    fn one(site: &Site, kind: &str) -> Event {
        let found = of_kind(site, kind);
        assert_eq!(found.len(), 1, "one {kind}: {found:?}");
        found.into_iter().next().expect("one")
    }

    #[test]
    fn a_takeover_of_a_sigkilled_holder_names_its_record_and_the_proof() {
        let site = Site::new();
        let mut holder = Holder::spawn(&site, "victim", &[]);
        holder.expect_held();
        let pid = holder.child.id();
        let raw = std::fs::read(site.path().join(LOCK)).expect("its record");
        let since = site.record().expect("record").acquired_at;
        holder.kill();
        let lease = site.held("contender", &Options::process());
        let Event::Takeover {
            resource,
            owner,
            stale_pid,
            stale_owner,
            stale_since,
            claim,
            proof,
        } = one(&site, "takeover")
        else {
            panic!("takeover");
        };
        assert_eq!((resource.as_str(), owner.as_str()), (LOCK, "contender"));
        assert_eq!(stale_pid, Some(pid));
        assert_eq!(stale_owner.as_deref(), Some("victim"));
        assert_eq!(stale_since, since);
        assert_eq!(
            claim,
            claim_name(LOCK, &raw),
            "the claim names the record's hash"
        );
        assert!(
            proof.contains("guard"),
            "its guard was free while it declared it held: {proof}"
        );
        drop(lease);
        assert!(
            of_kind(&site, "role-taken").is_empty(),
            "no role: no role event"
        );
    }

    #[test]
    fn a_role_lease_is_said_taken_refused_and_lost() {
        const TTL: u64 = 60_000;
        let site = Site::new();
        let clock = ManualClock::at(1_000_000);
        let role = || ttl_options(TTL, &clock).role("reviewer");
        let mut first = site.held("alice", &role());
        let Event::RoleTaken {
            role: name,
            resource,
            owner,
            ttl_ms,
            epoch,
        } = one(&site, "role-taken")
        else {
            panic!("role-taken");
        };
        assert_eq!(
            (
                name.as_str(),
                resource.as_str(),
                owner.as_str(),
                ttl_ms,
                epoch
            ),
            ("reviewer", LOCK, "alice", Some(TTL), first.epoch())
        );
        site.refused("bob", &role().unjournaled_refusals());
        assert!(
            of_kind(&site, "role-refused").is_empty(),
            "a refusal made with unjournaled_refusals is not said"
        );
        site.refused("bob", &role());
        let Event::RoleRefused {
            role: name,
            owner,
            holder_pid,
            holder_owner,
            why,
            ..
        } = one(&site, "role-refused")
        else {
            panic!("role-refused");
        };
        assert_eq!(
            (name.as_str(), owner.as_str(), holder_owner.as_deref()),
            ("reviewer", "bob", Some("alice"))
        );
        assert_eq!(holder_pid, Some(std::process::id()));
        assert!(why.contains("60000"), "within its TTL: {why}");
        // Alice's pulse lapses; Bob takes the role over; Alice learns it at her next pulse.
        clock.advance(TTL + 1);
        let second = site.held("bob", &role());
        assert_eq!(of_kind(&site, "role-taken").len(), 2);
        assert_eq!(
            of_kind(&site, "takeover").len(),
            1,
            "a lapsed pulse taken over"
        );
        let lost = gate::quietly(|| first.pulse()).expect_err("lost");
        assert!(matches!(lost, held::Error::LeaseLost { .. }), "{lost}");
        let Event::RoleLost {
            role: name,
            resource,
            why,
        } = one(&site, "role-lost")
        else {
            panic!("role-lost");
        };
        assert_eq!((name.as_str(), resource.as_str()), ("reviewer", LOCK));
        assert!(why.contains("bob"), "who holds it now: {why}");
        let _ = gate::quietly(|| first.pulse());
        assert_eq!(of_kind(&site, "role-lost").len(), 1, "lost once");
        // Bob gives the role back: said once; Alice's lost lease, dropped, says nothing.
        second.end(Lease::release).expect("release");
        let Event::RoleReleased {
            role: name,
            resource,
            owner,
        } = one(&site, "role-released")
        else {
            panic!("role-released");
        };
        assert_eq!(
            (name.as_str(), resource.as_str(), owner.as_str()),
            ("reviewer", LOCK, "bob")
        );
        drop(first);
        assert_eq!(of_kind(&site, "role-released").len(), 1);
    }
}
