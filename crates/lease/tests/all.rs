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
    Acquired, Lease, LiveWhy, ManualClock, Options, Record, Refusal, Request, acquire, claim_name,
    current_epoch, held,
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

    fn line(&mut self) -> String {
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
            matches!(err, worklane_lease::Error::NameTooLong { .. }),
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
    ) -> Result<Acquired, worklane_lease::Error> {
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
            matches!(err, worklane_lease::Error::Epoch { .. }),
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
        reached_rx.recv().expect("A reached the step");
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
