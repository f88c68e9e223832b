use super::*;

pub(super) const OVERLAP: &str = r#"
bump() { flock "$T/count.lock" sh -c "$1"; }
bump 'n=$(cat "$T/n" 2>/dev/null || echo 0); n=$((n+1)); echo $n > "$T/n"; echo $n >> "$T/log"; if [ $n -ge 4 ]; then touch "$T/reached"; fi'
i=0; while [ ! -e "$T/reached" ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done
sleep 0.1
bump 'n=$(cat "$T/n"); echo $((n-1)) > "$T/n"'
"#;

/// Starts `n` runs of `sh SCRIPT` at once (`SCRIPT` counts how many run at a time into
/// `$T/log` through `$T/n`), waits until each has succeeded, and returns the counts.
pub(super) fn overlaps(site: &Site, script: &str, n: usize) -> Vec<u32> {
    let script = site.write_script("overlap.sh", script);
    let children: Vec<Running> = (0..n)
        .map(|i| {
            Running::new(
                site.worklane()
                    .args(["run", "--", "sh", &script])
                    .env("K", i.to_string())
                    .stdout(Stdio::null())
                    .stderr(Stdio::piped())
                    .spawn_gated()
                    .expect("spawn"),
            )
        })
        .collect();
    for c in children {
        let out = c.wait_with_output().expect("wait");
        assert!(
            out.status.success(),
            "every run completes: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let log = std::fs::read_to_string(site.file("log")).expect("the children's log");
    log.lines().map(|l| l.parse().expect("a count")).collect()
}

#[test]
fn eight_runs_under_a_cap_of_four_overlap_to_four_and_never_more() {
    let site = Site::new(Some(r#"{"max_agents": 4}"#));
    let counts = overlaps(&site, OVERLAP, 8);
    assert_eq!(
        counts.len(),
        8,
        "every child recorded its start: {counts:?}"
    );
    let max = counts.iter().copied().max().expect("counts");
    assert_eq!(
        max, 4,
        "the overlap reaches the cap and never exceeds it: {counts:?}"
    );
}

#[test]
fn with_no_wait_exactly_four_run_and_four_exit_75() {
    let site = Site::new(Some(r#"{"max_agents": 4}"#));
    let script = r#"touch "$T/up.$K"; while [ ! -e "$T/go" ]; do sleep 0.02; done"#;
    let mut children: Vec<Running> = (0..8)
        .map(|i| site.spawn(&["run", "--no-wait"], script, &i.to_string()))
        .collect();
    let mut refused = 0;
    let mut exited = [false; 8];
    wait_until("four refusals", || {
        for (i, c) in children.iter_mut().enumerate() {
            if !exited[i]
                && let Some(status) = c.try_wait().expect("try_wait")
            {
                exited[i] = true;
                assert_eq!(status.code(), Some(75), "a refused run exits 75");
                refused += 1;
            }
        }
        refused >= 4
    });
    wait_until("four runs up", || {
        (0..8)
            .filter(|i| site.file(&format!("up.{i}")).exists())
            .count()
            == 4
    });
    std::fs::write(site.file("go"), b"").expect("go");
    for (i, c) in children.iter_mut().enumerate() {
        if !exited[i] {
            let status = wait_exit(c, "a running child");
            assert!(status.success(), "the admitted runs complete: {status}");
        }
    }
    assert_eq!(refused, 4, "exactly four were refused");
    let up = (0..8)
        .filter(|i| site.file(&format!("up.{i}")).exists())
        .count();
    assert_eq!(up, 4, "exactly four ran");
}

#[test]
fn lowering_the_cap_admits_nobody_until_fewer_run() {
    let site = Site::new(Some(r#"{"max_agents": 4}"#));
    let mut holders: Vec<Running> = (0..4)
        .map(|i| site.spawn(&["run"], HOLD, &i.to_string()))
        .collect();
    wait_until("four holders", || {
        (0..4).all(|i| site.file(&format!("up.{i}")).exists())
    });
    std::fs::write(site.slots().join("config.json"), r#"{"max_agents": 2}"#).expect("cap");
    for (i, holder) in holders.iter_mut().enumerate().take(2) {
        std::fs::write(site.file(&format!("release.{i}")), b"").expect("release");
        let status = wait_exit(holder, "a released holder");
        assert!(status.success());
        assert_eq!(
            site.code(&["run", "--no-wait", "--", "true"]),
            75,
            "{} still run under a cap of 2: nobody is admitted",
            3 - i
        );
    }
    std::fs::write(site.file("release.2"), b"").expect("release");
    wait_exit(&mut holders[2], "a released holder");
    assert_eq!(
        site.code(&["run", "--no-wait", "--", "true"]),
        0,
        "one runs under a cap of 2: admitted"
    );
    std::fs::write(site.file("release.3"), b"").expect("release");
    wait_exit(&mut holders[3], "the last holder");
}

#[test]
fn a_sigkilled_run_and_its_child_free_the_slot() {
    let site = Site::new(Some(r#"{"max_agents": 1}"#));
    let mut run = site.spawn(&["run"], r#"echo $$ > "$T/child.pid"; exec sleep 600"#, "0");
    wait_until("the child's pid", || {
        std::fs::read_to_string(site.file("child.pid")).is_ok_and(|s| s.ends_with('\n'))
    });
    assert_eq!(
        site.code(&["run", "--no-wait", "--", "true"]),
        75,
        "the slot is held"
    );
    let child: i32 = std::fs::read_to_string(site.file("child.pid"))
        .expect("pid")
        .trim()
        .parse()
        .expect("a pid");
    run.kill().expect("SIGKILL worklane run");
    run.wait().expect("reap");
    let pid = rustix::process::Pid::from_raw(child).expect("pid");
    // The parent-death signal may have ended it already.
    let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
    // A SIGKILL is delivered, not done, when kill(2) returns: the child's descriptors
    // (the guard's copy among them) close when it has exited, a zombie or gone.
    wait_until("the child to have exited", || {
        std::fs::read_to_string(format!("/proc/{child}/stat")).map_or(true, |stat| {
            stat.rsplit_once(") ")
                .is_some_and(|(_, rest)| rest.starts_with('Z'))
        })
    });
    assert_eq!(
        site.code(&["run", "--no-wait", "--", "true"]),
        0,
        "the dead run's slot is taken over at once"
    );
}
