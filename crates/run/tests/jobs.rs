//! `Supervisor::jobs`: a build's jobserver backed by the machine's job slots (`max_jobs`),
//! with real GNU make and clients that read tokens and die, each build under a `run-holder`
//! of its own (a jobserver reads its own process's tree, so a build is never this test's
//! child).

use super::*;

impl Site {
    /// The job slots held now.
    fn jobs_held(&self) -> usize {
        gate::quietly(|| self.pool.snapshot())
            .expect("snapshot")
            .slots
            .iter()
            .filter(|s| s.kind == "job" && s.state.is_held())
            .count()
    }

    /// The journal's events of `kind`.
    fn journaled(&self, kind: &str) -> Vec<worklane_journal::Event> {
        worklane_journal::read(self.pool.dir())
            .expect("read the journal")
            .entries
            .into_iter()
            .map(|e| e.event)
            .filter(|e| e.kind() == kind)
            .collect()
    }

    /// Every count the targets saw at their start.
    fn counts(&self) -> Vec<u32> {
        std::fs::read_to_string(self.path("counter.log"))
            .unwrap_or_default()
            .lines()
            .map(|l| l.parse().expect("a count"))
            .collect()
    }

    /// A Makefile of `targets` targets that each count themselves in while they run (under
    /// flock(1)), sleep `secs`, and count themselves out; every count seen at a start goes to
    /// `$CTR.log`.
    fn makefile(&self, targets: u32, secs: &str) {
        let text = format!(
            "T := $(shell seq 1 {targets})\n\
             all: $(addprefix t,$(T))\n\
             t%:\n\
             \t@flock $(CTR).lock sh -c 'n=$$(($$(cat $(CTR) 2>/dev/null || echo 0)+1)); echo $$n > $(CTR); echo $$n >> $(CTR).log'; \
             sleep {secs}; \
             flock $(CTR).lock sh -c 'echo $$(($$(cat $(CTR))-1)) > $(CTR)'\n"
        );
        std::fs::write(self.path("Makefile"), text).expect("Makefile");
    }
}

/// Waits for the build's outcome line and its end; its command's exit code.
fn finished(mut build: Holder) -> String {
    assert!(build.line().starts_with("held agent-"), "an agent slot");
    let outcome = build.line();
    assert!(build.end().success(), "run-holder exits 0: {outcome}");
    outcome
}

#[test]
fn builds_never_run_more_targets_at_once_than_max_jobs() {
    let site = Site::with_caps(8, 4);
    site.makefile(30, "0.05");
    let builds: Vec<Holder> = (0..3)
        .map(|_| site.build_of(&["--jobs"], &["make", "-s", "-j32"]))
        .collect();
    for b in builds {
        assert_eq!(finished(b), "outcome 0 - - false");
    }
    let seen = site.counts();
    assert_eq!(seen.len(), 90, "every target of the three builds ran");
    let most = seen.iter().copied().max().expect("counts");
    assert!(most <= 4, "never more than max_jobs (4) at once: {most}");
    assert_eq!(site.jobs_held(), 0, "every job slot is released");
    assert!(site.journaled("jobs-escaped").is_empty(), "no escape");
}

#[test]
fn one_build_runs_at_the_machines_full_width_or_its_share() {
    let site = Site::with_caps(8, 3);
    site.makefile(9, "0.3");
    assert_eq!(
        finished(site.build_of(&["--jobs"], &["make", "-s", "-j32"])),
        "outcome 0 - - false"
    );
    assert_eq!(
        site.counts().iter().copied().max(),
        Some(3),
        "as wide as max_jobs (3) and no wider"
    );
    std::fs::remove_file(site.path("counter.log")).expect("a new log");
    assert_eq!(
        finished(site.build_of(&["--jobs=2"], &["make", "-s"])),
        "outcome 0 - - false"
    );
    assert_eq!(site.counts().iter().copied().max(), Some(2), "--jobs=2");
}

#[test]
fn the_build_is_told_its_jobserver_in_either_form() {
    let site = Site::with_caps(8, 3);
    let tell = r#"printf '%s' "$MAKEFLAGS" > "$T/flags"; printf '%s' "$CARGO_MAKEFLAGS" > "$T/cargo"; printf '%s' "$WORKLANE_JOBSERVER" > "$T/fifo"; ls -l "$WORKLANE_JOBSERVER" > "$T/mode""#;
    let read = |name: &str| std::fs::read_to_string(site.path(name)).expect(name);
    assert_eq!(
        finished(site.build(&["--jobs=4"], tell)),
        "outcome 0 - - false"
    );
    let flags = read("flags");
    assert!(
        flags.starts_with("-j4 --jobserver-auth=") && flags.contains(','),
        "two descriptors and the share: {flags}"
    );
    assert_eq!(read("cargo"), flags, "cargo's too");
    assert!(
        read("mode").starts_with("prw-------"),
        "a FIFO of its user's alone: {}",
        read("mode")
    );
    assert!(!Path::new(&read("fifo")).exists(), "removed at the end");
    assert_eq!(
        finished(site.build(&["--jobs", "--jobs-style=fifo"], tell)),
        "outcome 0 - - false"
    );
    assert_eq!(
        read("flags"),
        format!("-j --jobserver-auth=fifo:{}", read("fifo")),
        "no share: `-j` alone; the FIFO by its path"
    );
    let tell_path = format!(r#"{tell}; printf '%s' "$PATH" > "$T/path""#);
    assert_eq!(
        finished(site.build(&["--jobs", "--jobs-style=fifo", "--jobs-shim"], &tell_path)),
        "outcome 0 - - false"
    );
    assert_eq!(
        read("flags"),
        format!("-j --jobserver-auth=fifo:{}", read("fifo")),
        "with the shims too"
    );
    let fifo = PathBuf::from(read("fifo"));
    let shims = fifo.parent().expect("its directory").join("bin");
    assert!(
        read("path").starts_with(&format!("{}:", shims.display())),
        "the shims first on PATH: {}",
        read("path")
    );
}

#[test]
fn an_older_make_style_client_reads_and_returns_tokens_through_the_descriptors() {
    let site = Site::with_caps(8, 3);
    // What make before 4.4 does: a blocking read of one byte per job on R, the byte written
    // back on W.
    let client = r#"
        set -- $(printf '%s' "$MAKEFLAGS" | sed -n 's/.*--jobserver-auth=\([0-9]*\),\([0-9]*\).*/\1 \2/p')
        python3 - "$1" "$2" <<'EOF'
import os, sys
r, w = int(sys.argv[1]), int(sys.argv[2])
got = [os.read(r, 1) for _ in range(2)]
open(os.environ["T"] + "/got", "w").write(str(len(b"".join(got))))
for t in got:
    os.write(w, t)
EOF
    "#;
    assert_eq!(
        finished(site.build(&["--jobs"], client)),
        "outcome 0 - - false"
    );
    assert_eq!(
        std::fs::read_to_string(site.path("got")).expect("got"),
        "2",
        "two tokens beside the implicit one (max_jobs 3)"
    );
    assert_eq!(site.jobs_held(), 0, "returned, and released");
}

/// Runs `thief` (a build script that reads a token into `$T/stolen`, touches `$T/up`, and
/// keeps its tree running until `$T/release`) and checks that the stolen token is judged lost:
/// both job slots were held (the build's own, the stolen token's), so another build's job gets
/// one only once it is.
fn a_stolen_token_comes_back(thief: &str) {
    let site = Site::with_caps(8, 2);
    let mut build = site.build(&["--jobs", "--jobs-style=fifo"], thief);
    assert_eq!(build.line(), "held agent-0.lock");
    assert!(
        eventually(|| site.path("up").exists()),
        "the thief has its token"
    );
    assert_eq!(std::fs::read(site.path("stolen")).expect("stolen").len(), 1);
    // Waited for outside the fork gate (a quiet section blocks every start of the process);
    // only the release must be quiet.
    let other = site.pool.take(
        Kind::Job,
        &Request::new("another build"),
        worklane_admission::Wait {
            timeout: Some(Duration::from_secs(20)),
            priority: 0,
            on_wait: &mut |_| {},
        },
    );
    match other {
        Ok(Take::Held(slot)) => gate::quietly(|| slot.release()).expect("release"),
        other => panic!("the lost token's slot never came back: {other:?}"),
    }
    std::fs::write(site.path("release"), "").expect("release");
    assert_eq!(build.line(), "outcome 0 - - false");
    assert!(build.end().success());
    assert_eq!(site.jobs_held(), 0, "nothing held once the tree has ended");
}

/// A client of the fifo form reads a token and exits; the tree runs on without anyone
/// holding the jobserver, so the token is judged lost and its slot returned.
#[test]
fn a_token_read_and_never_written_back_is_returned_while_the_tree_runs() {
    a_stolen_token_comes_back(
        r#"
        head -c 1 "$WORKLANE_JOBSERVER" > "$T/stolen"
        touch "$T/up"
        while [ ! -e "$T/release" ]; do sleep 0.02; done
    "#,
    );
}

/// The same in a tree of several live processes (three `sleep`s beside the shell) of which
/// none has the FIFO open: the tokens out are lost whatever the tree's threads, since nobody
/// can write them back.
#[test]
fn a_token_lost_in_a_tree_of_many_processes_none_holding_the_fifo_is_returned() {
    a_stolen_token_comes_back(
        r#"
        head -c 1 "$WORKLANE_JOBSERVER" > "$T/stolen"
        sleep 30 < /dev/null & a=$!; sleep 30 < /dev/null & b=$!; sleep 30 < /dev/null & c=$!
        touch "$T/up"
        while [ ! -e "$T/release" ]; do sleep 0.02; done
        kill $a $b $c; wait
    "#,
    );
}

/// The same while the FIFO is never quiet for long (a busy build: here its attributes are
/// changed every 20 ms, which wakes the accountant as a token's read or write does): the look
/// for lost tokens still comes every 250 ms, not only after a quarter second without events.
#[test]
fn a_token_lost_in_a_busy_build_is_returned_all_the_same() {
    a_stolen_token_comes_back(
        r#"
        head -c 1 "$WORKLANE_JOBSERVER" > "$T/stolen"
        touch "$T/up"
        while [ ! -e "$T/release" ]; do touch "$WORKLANE_JOBSERVER"; sleep 0.02; done
    "#,
    );
}

#[test]
fn a_killed_supervisor_frees_no_job_slot_its_build_still_uses() {
    let site = Site::with_caps(2, 3);
    // A client that takes a token, then runs on (ignoring the SIGTERM its supervisor's death
    // sends) until it is released.
    let client = r#"
        trap '' TERM
        head -c 1 "$WORKLANE_JOBSERVER" > /dev/null
        touch "$T/up"
        while [ ! -e "$T/release" ]; do sleep 0.02; done
    "#;
    let mut build = site.build(&["--jobs", "--jobs-style=fifo"], client);
    assert_eq!(build.line(), "held agent-0.lock");
    assert!(
        eventually(|| site.path("up").exists()),
        "the client holds its token"
    );
    assert!(
        eventually(|| site.jobs_held() >= 2),
        "the build's own slot and its token's"
    );
    build.signal(rustix::process::Signal::KILL);
    let _ = build.end();
    // The build's own by the guard it inherited, the token's by the descriptor in flight in
    // the keeper socket the tree inherited.
    assert!(
        site.jobs_held() >= 2,
        "nothing the live build uses is freed by its supervisor's death"
    );
    std::fs::write(site.path("release"), "").expect("release");
    assert!(
        eventually(|| site.jobs_held() == 0),
        "every job slot free once the tree has ended"
    );
}

/// A build whose supervisor was killed keeps its FIFO while it runs on: another build's sweep
/// of the directories killed supervisors left (a minute old, their lock free) passes over
/// it, since the tree inherited the directory's lock. Before, the lock died with the
/// supervisor and the next `--jobs` start removed the FIFO the live build's clients open.
#[test]
fn a_build_that_outlived_its_killed_supervisor_keeps_its_fifo_through_another_build_s_sweep() {
    let site = Site::with_caps(2, 3);
    let tmp = site.path("tmp");
    std::fs::create_dir(&tmp).expect("a temp directory of its own");
    let client = r#"
        trap '' TERM
        printf '%s' "$WORKLANE_JOBSERVER" > "$T/fifo"
        while [ ! -e "$T/release" ]; do sleep 0.02; done
    "#;
    let build = |options: &[&str], script: &str| {
        site.build_in(
            options,
            &["sh", "-c", script],
            &[("TMPDIR", tmp.as_os_str())],
        )
    };
    let mut first = build(&["--jobs", "--jobs-style=fifo"], client);
    assert_eq!(first.line(), "held agent-0.lock");
    assert!(
        eventually(|| site.path("fifo").exists()),
        "the client says where its FIFO is"
    );
    let fifo = PathBuf::from(std::fs::read_to_string(site.path("fifo")).expect("the path"));
    first.signal(rustix::process::Signal::KILL);
    let _ = first.end();
    // Its directory made to look two minutes old, as after a long build.
    let dir = fifo.parent().expect("the FIFO's directory");
    let old = std::time::SystemTime::now() - Duration::from_secs(120);
    std::fs::File::open(dir)
        .and_then(|d| d.set_modified(old))
        .expect("age the directory");
    let mut second = build(&["--jobs", "--jobs-style=fifo"], "true");
    assert_eq!(second.line(), "held agent-1.lock");
    assert!(second.end().success());
    let kept = std::fs::symlink_metadata(&fifo);
    std::fs::write(site.path("release"), "").expect("release");
    use std::os::unix::fs::FileTypeExt;
    assert!(
        kept.is_ok_and(|m| m.file_type().is_fifo()),
        "the live build's FIFO was removed by the other build's sweep"
    );
}

/// A client of the jobserver reads a token, waits for the next standby, writes its token back,
/// then waits until the jobserver has read the surplus back (one byte waits in the FIFO).
const RETURN_ONE: &str = r#"python3 - "$WORKLANE_JOBSERVER" <<'EOF'
import array, fcntl, os, sys, termios, time
fd = os.open(sys.argv[1], os.O_RDWR)
def waiting():
    n = array.array('i', [0])
    fcntl.ioctl(fd, termios.FIONREAD, n)
    return n[0]
deadline = time.time() + 10
def until_one():
    while waiting() != 1 and time.time() < deadline:
        time.sleep(0.01)
os.read(fd, 1)
until_one()
os.write(fd, b'+')
until_one()
EOF"#;

#[test]
fn a_make_given_its_own_j_through_a_shell_is_said_to_escape_and_the_shim_keeps_it_in() {
    let site = Site::with_caps(8, 3);
    // Long enough for the two looks a second apart, whenever the first falls. A token read
    // and written back first (the jobserver reads the surplus back), so that the tokens out
    // are counted from what was written less what was read.
    site.makefile(8, "2.5");
    let script = format!("{RETURN_ONE}\nexec make -s -j8");
    assert_eq!(
        finished(site.build(&["--jobs"], &script)),
        "outcome 0 - - false"
    );
    let most = site.counts().into_iter().max().unwrap_or(0);
    assert!(most > 3, "it did run past max_jobs: {most}");
    let escaped = site.journaled("jobs-escaped");
    assert_eq!(escaped.len(), 1, "said once: {escaped:?}");
    let worklane_journal::Event::JobsEscaped {
        command,
        tokens,
        processes,
    } = &escaped[0]
    else {
        panic!("{escaped:?}");
    };
    assert!(command.ends_with("exec make -s -j8"), "{command}");
    assert_eq!(*tokens, 1, "its own alone: make read none");
    assert!(*processes > 3, "more than three per token: {processes}");
    std::fs::remove_file(site.path("counter.log")).expect("a new log");
    site.makefile(9, "0.3");
    assert_eq!(
        finished(site.build(
            &["--jobs", "--jobs-shim"],
            "env nice make -s -j 8 --jobs=8 -j8"
        )),
        "outcome 0 - - false"
    );
    let seen = site.counts();
    assert_eq!(seen.len(), 9, "every target ran: {seen:?}");
    assert_eq!(
        seen.iter().copied().max(),
        Some(3),
        "within max_jobs (3) and as wide, though asked -j8 three ways"
    );
    assert_eq!(site.journaled("jobs-escaped").len(), 1, "no new escape");
}

#[test]
fn a_jobserver_run_by_hand_gives_its_fifo_and_descriptors_once_and_removes_them_at_its_end() {
    // In a run-holder of its own: the descriptors a build inherits are not close-on-exec, and
    // an accountant that hangs must not hang the test process.
    let site = Site::with_caps(8, 3);
    for (share, style, end) in [("3", "fds", "end"), ("2", "fifo", "drop")] {
        let mut cmd = site.holder_command(&["jobserver", share, style]);
        cmd.stdin(Stdio::piped());
        let mut server = Holder::start(&mut cmd);
        let fifo = PathBuf::from(server.line().strip_prefix("fifo ").expect("its FIFO first"));
        assert!(fifo.exists(), "{}", fifo.display());
        let inherit = server.line();
        let fds: Vec<&str> = inherit
            .strip_prefix("inherit ")
            .expect("inherit")
            .split(' ')
            .collect();
        assert_eq!(
            fds.len(),
            if style == "fds" { 4 } else { 2 },
            "{style}: the keeper socket's end, the directory's lock, and the FIFO's two with \
             descriptors: {inherit}"
        );
        assert_eq!(server.line(), "inherit again 0", "given away once");
        let mut env = Vec::new();
        loop {
            let line = server.line();
            if line == "started" || line.is_empty() || env.len() > 10 {
                break;
            }
            env.push(line);
        }
        let auth = if style == "fds" {
            format!("{},{}", fds[2], fds[3])
        } else {
            format!("fifo:{}", fifo.display())
        };
        assert!(
            env.iter().any(|l| l.starts_with("env MAKEFLAGS=")
                && l.ends_with(&format!("-j{share} --jobserver-auth={auth}"))),
            "{style}: the share and the jobserver: {env:?}"
        );
        assert!(
            env.contains(&format!("env WORKLANE_JOBSERVER={}", fifo.display())),
            "{env:?}"
        );
        assert!(
            eventually(|| site.jobs_held() == 1),
            "one standby token, its job slot taken"
        );
        std::io::Write::write_all(
            server.child.stdin.as_mut().expect("stdin"),
            format!("{end}\n").as_bytes(),
        )
        .expect("tell it");
        assert_eq!(server.line(), "ended", "{end}");
        assert!(!fifo.exists(), "{end}: the FIFO goes");
        assert!(
            !fifo.parent().expect("its directory").exists(),
            "{end}: and its directory"
        );
        assert_eq!(site.jobs_held(), 0, "{end}: the standby's slot released");
        assert!(server.end().success());
    }
}

#[test]
fn a_byte_no_token_accounts_for_is_dropped_and_the_build_runs_full_width() {
    let site = Site::with_caps(8, 3);
    site.makefile(9, "0.3");
    // A client writes a byte it never read (once the standby is there, so that the byte is
    // surely a stray), waits until the jobserver has taken it back out, then runs make (which
    // reads the jobserver).
    let script = r#"
        python3 - "$WORKLANE_JOBSERVER" <<'EOF'
import array, fcntl, os, sys, termios, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_NONBLOCK)
def waiting():
    n = array.array('i', [0])
    fcntl.ioctl(fd, termios.FIONREAD, n)
    return n[0]
deadline = time.time() + 10
while waiting() != 1 and time.time() < deadline:
    time.sleep(0.01)
os.write(fd, b'+')
while waiting() != 1 and time.time() < deadline:
    time.sleep(0.01)
EOF
        exec make -s
    "#;
    assert_eq!(
        finished(site.build(&["--jobs"], script)),
        "outcome 0 - - false"
    );
    let seen = site.counts();
    assert_eq!(seen.len(), 9, "every target ran: {seen:?}");
    assert_eq!(
        seen.iter().copied().max(),
        Some(3),
        "as wide as max_jobs, and no wider: the stray byte was no token"
    );
    assert_eq!(site.jobs_held(), 0, "every slot released");
}

#[test]
fn a_token_stolen_after_one_came_back_is_still_judged_lost() {
    let site = Site::with_caps(8, 3);
    // A client reads a token and writes it back (the jobserver reads the surplus back), then
    // a thief reads one and exits, the tree running on without anyone holding the jobserver.
    let script = r#"
        head -c 1 "$WORKLANE_JOBSERVER" > /dev/null
        touch "$T/one"
        while [ ! -e "$T/back" ]; do sleep 0.02; done
        printf + > "$WORKLANE_JOBSERVER"
        while [ ! -e "$T/steal" ]; do sleep 0.02; done
        head -c 1 "$WORKLANE_JOBSERVER" > /dev/null
        touch "$T/up"
        while [ ! -e "$T/release" ]; do sleep 0.02; done
        # Standbys keep coming, one read after the other: the accounts still add up.
        exec timeout 10 head -c 2 "$WORKLANE_JOBSERVER" > /dev/null
    "#;
    let mut build = site.build(&["--jobs", "--jobs-style=fifo"], script);
    assert_eq!(build.line(), "held agent-0.lock");
    assert!(eventually(|| site.path("one").exists()), "a token read");
    assert!(
        eventually(|| site.jobs_held() == 3),
        "the build's own, the one read, a standby"
    );
    std::fs::write(site.path("back"), "").expect("back");
    assert!(
        eventually(|| site.jobs_held() == 2),
        "written back: one of the two standing by is read back and its slot released"
    );
    std::fs::write(site.path("steal"), "").expect("steal");
    assert!(eventually(|| site.path("up").exists()), "stolen");
    // Waited for outside the fork gate (a quiet section blocks every start of the process);
    // only the release must be quiet.
    let other = {
        site.pool.take(
            Kind::Job,
            &Request::new("another build"),
            worklane_admission::Wait {
                timeout: Some(Duration::from_secs(15)),
                priority: 0,
                on_wait: &mut |_| {},
            },
        )
    };
    match other {
        Ok(Take::Held(slot)) => gate::quietly(|| slot.release()).expect("release"),
        other => panic!("the stolen token's slot never came back: {other:?}"),
    }
    std::fs::write(site.path("release"), "").expect("release");
    assert_eq!(build.line(), "outcome 0 - - false");
    assert!(build.end().success());
    assert_eq!(site.jobs_held(), 0);
}

#[test]
fn a_token_written_back_goes_to_a_build_waiting_in_the_job_line() {
    let site = Site::with_caps(8, 2);
    // Build A holds both job slots (its own and a token); its t1 ends once build B waits in
    // the job line, its t2 only once B has run: A ends only if the token t1 gives back (make
    // has nothing else to run on it) goes to B rather than standing by for A.
    let wait_for = |file: &str| {
        format!(
            "@i=0; while [ ! -e $(T)/{file} ]; do i=$$((i+1)); [ $$i -gt 200 ] && exit 1; sleep 0.05; done"
        )
    };
    std::fs::write(
        site.path("Makefile"),
        format!(
            "all: t1 t2\nt1:\n\t{}\nt2:\n\t{}\n",
            wait_for("b-queued"),
            wait_for("b-ran")
        ),
    )
    .expect("Makefile");
    let mut a = site.build_of(&["--jobs"], &["make", "-s"]);
    assert_eq!(a.line(), "held agent-0.lock");
    assert!(
        eventually(|| site.jobs_held() == 2),
        "A holds both job slots"
    );
    let mut b = site.build(&["--jobs"], r#"touch "$T/b-ran""#);
    assert_eq!(b.line(), "held agent-1.lock");
    assert!(
        eventually(
            || gate::quietly(|| site.pool.line_views()).is_ok_and(|l| l.iter().any(|v| v
                .entry
                .kind
                == "job"
                && v.live))
        ),
        "B waits in the job line"
    );
    std::fs::write(site.path("b-queued"), "").expect("b-queued");
    assert_eq!(b.line(), "outcome 0 - - false", "B got A's token's slot");
    assert!(b.end().success());
    assert_eq!(a.line(), "outcome 0 - - false", "and A went on to its end");
    assert!(a.end().success());
    assert_eq!(site.jobs_held(), 0);
}

#[test]
fn a_lost_token_that_comes_back_later_is_read_back_not_handed_out_again() {
    let site = Site::with_caps(8, 2);
    // A thief reads the standby and keeps it while nobody holds the jobserver, so it is judged
    // lost (the test takes its slot); then it writes it back: no slot backs that byte, so the
    // jobserver reads it back, and nobody can read a token until the test lets its slot go.
    let script = r#"
        head -c 1 "$WORKLANE_JOBSERVER" > /dev/null
        touch "$T/up"
        while [ ! -e "$T/back" ]; do sleep 0.02; done
        python3 - "$WORKLANE_JOBSERVER" <<'EOF'
import array, fcntl, os, sys, termios, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_NONBLOCK)
os.write(fd, b'+')
deadline = time.time() + 10
while time.time() < deadline:
    n = array.array('i', [0])
    fcntl.ioctl(fd, termios.FIONREAD, n)
    if n[0] == 0:
        break
    time.sleep(0.01)
EOF
        timeout 1 head -c 1 "$WORKLANE_JOBSERVER" > /dev/null
        echo $? > "$T/no-token"
        touch "$T/asked"
        while [ ! -e "$T/release" ]; do sleep 0.02; done
        exec timeout 10 head -c 1 "$WORKLANE_JOBSERVER" > /dev/null
    "#;
    let mut build = site.build(&["--jobs", "--jobs-style=fifo"], script);
    assert_eq!(build.line(), "held agent-0.lock");
    assert!(eventually(|| site.path("up").exists()), "stolen");
    let taken = site.pool.take(
        Kind::Job,
        &Request::new("another build"),
        worklane_admission::Wait {
            timeout: Some(Duration::from_secs(15)),
            priority: 0,
            on_wait: &mut |_| {},
        },
    );
    let Ok(Take::Held(slot)) = taken else {
        panic!("the stolen token's slot never came back: {taken:?}");
    };
    std::fs::write(site.path("back"), "").expect("back");
    assert!(
        eventually(|| site.path("asked").exists()),
        "a token asked for"
    );
    assert_eq!(
        std::fs::read_to_string(site.path("no-token"))
            .expect("no-token")
            .trim(),
        "124",
        "no token while both job slots are held (the build's own and the test's): the byte \
         that came back was read back"
    );
    gate::quietly(|| slot.release()).expect("release");
    std::fs::write(site.path("release"), "").expect("release");
    assert_eq!(
        build.line(),
        "outcome 0 - - false",
        "the slot let go backs a standby again"
    );
    assert!(build.end().success());
    assert_eq!(site.jobs_held(), 0);
}

#[test]
fn three_processes_at_work_per_token_are_no_escape() {
    let site = Site::with_caps(8, 3);
    // The build's own token alone and three processes working under it, for two looks a
    // second apart: a recipe may be a pipeline of three.
    assert_eq!(
        finished(site.build(&["--jobs"], "sleep 2.5 & sleep 2.5 & sleep 2.5 & wait")),
        "outcome 0 - - false"
    );
    assert_eq!(site.journaled("jobs-escaped"), [], "not said");
}

#[test]
fn a_burst_shorter_than_a_second_is_no_escape() {
    let site = Site::with_caps(8, 3);
    // Five processes at work under the build's own token for 0.8 s, then one: over three per
    // token, but never at two looks a second apart.
    assert_eq!(
        finished(site.build(
            &["--jobs"],
            "for i in 1 2 3 4 5; do sleep 0.8 & done; wait; sleep 1.5"
        )),
        "outcome 0 - - false"
    );
    assert_eq!(site.journaled("jobs-escaped"), [], "not said");
}

#[test]
fn an_idle_build_keeps_its_one_standby() {
    let site = Site::with_caps(8, 3);
    // Nobody waits in the job line and the build reads no token: the standby stays, taken
    // once, for the whole run.
    assert_eq!(
        finished(site.build(&["--jobs"], "sleep 1.5")),
        "outcome 0 - - false"
    );
    let taken = site
        .journaled("slot-taken")
        .into_iter()
        .filter(|e| matches!(e, worklane_journal::Event::SlotTaken { slot_kind, .. } if slot_kind == "job"))
        .count();
    assert_eq!(taken, 2, "the build's own job slot and one standby's");
}

/// The standby waiting in the FIFO keeps its job slot held all along, through the
/// accountant's passes: a byte in the FIFO without a slot would let a client run a job past
/// the machine's cap.
#[test]
fn an_idle_builds_standby_keeps_its_job_slot_held_throughout() {
    let site = Site::with_caps(8, 3);
    let idle = r#"while [ ! -e "$T/release" ]; do sleep 0.02; done"#;
    let mut build = site.build(&["--jobs", "--jobs-style=fifo"], idle);
    assert_eq!(build.line(), "held agent-0.lock");
    assert!(
        eventually(|| site.jobs_held() == 2),
        "the build's own job slot and its standby's"
    );
    // A second and a half: six looks for lost tokens, each a pass over the accounts.
    for _ in 0..75 {
        assert_eq!(site.jobs_held(), 2, "the standby's slot stays held");
        std::thread::sleep(Duration::from_millis(20));
    }
    std::fs::write(site.path("release"), "").expect("release");
    assert_eq!(build.line(), "outcome 0 - - false");
    assert!(build.end().success());
    assert_eq!(site.jobs_held(), 0, "nothing held once the tree has ended");
}

#[test]
fn a_token_written_back_beside_a_standby_gives_back_its_own_slot_only() {
    let site = Site::with_caps(8, 3);
    // The build's own slot, the first standby's (read), the next standby's; the first token
    // written back is the surplus: its slot goes, the standby stays.
    let script = format!("{RETURN_ONE}\nsleep 1");
    assert_eq!(
        finished(site.build(&["--jobs", "--jobs-style=fifo"], &script)),
        "outcome 0 - - false"
    );
    let taken = site
        .journaled("slot-taken")
        .into_iter()
        .filter(|e| matches!(e, worklane_journal::Event::SlotTaken { slot_kind, .. } if slot_kind == "job"))
        .count();
    assert_eq!(
        taken, 3,
        "no standby read back with the surplus and taken again"
    );
}
