//! The dispatcher bounded (issue 33): it sleeps while a row waits at the cap, and no client,
//! by its connections or by its rows, holds up anyone else's requests.

use super::dispatcher::{enqueue, start, states};
use super::queue_rights::{MEMBER, MEMBER_GID, SHARED, as_member, shared_site};
use super::*;

/// The CPU time `pid` has used (user and system), in clock ticks (`/proc/<pid>/stat` fields 14
/// and 15, in USER_HZ: 100 a second on Linux).
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("stat");
    let after = &stat[stat.rfind(')').expect("comm") + 2..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    // Fields 14 and 15 of the whole line are 12 and 13 after the command's.
    fields[11].parse::<u64>().expect("utime") + fields[12].parse::<u64>().expect("stime")
}

/// The largest epoch of `slots.lock` (the number of its latest `slots.lock.epoch.<n>`).
fn slots_epoch(site: &Site) -> u64 {
    std::fs::read_dir(site.slots())
        .expect("list")
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .filter_map(|n| n.strip_prefix("slots.lock.epoch.")?.parse::<u64>().ok())
        .max()
        .unwrap_or(0)
}

/// One row waits at the cap for 5 s: the dispatcher uses under 5 % of a core for it and takes
/// `slots.lock` a handful of times at most (a pass that can admit nothing takes no lock and
/// writes no file), and the row runs once the slot is released.
#[test]
fn a_row_waiting_at_the_cap_costs_the_dispatcher_almost_nothing() {
    let site = Site::new(Some(r#"{"max_agents": 1}"#));
    let dispatcher = start(&site, &[]);
    let _holder = site.spawn(&["run"], HOLD, "h");
    wait_until("the holder's command", || site.file("up.h").exists());
    let out = enqueue(&site, &["--lane", "w"], r#"touch "$T/w-ran""#);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let attempt = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    wait_until("the row queued", || {
        states(&site)
            .get(&attempt)
            .is_some_and(|r| r["state"] == "queued")
    });
    let (ticks, epoch, began) = (
        cpu_ticks(dispatcher.id()),
        slots_epoch(&site),
        Instant::now(),
    );
    std::thread::sleep(Duration::from_secs(5));
    let used_ms = (cpu_ticks(dispatcher.id()) - ticks) * 10;
    let elapsed_ms = u64::try_from(began.elapsed().as_millis()).expect("ms");
    let rose = slots_epoch(&site) - epoch;
    assert!(
        used_ms * 20 < elapsed_ms,
        "under 5 % of a core while the row waits: {used_ms} ms of CPU in {elapsed_ms} ms"
    );
    assert!(
        rose <= 5,
        "slots.lock taken a handful of times, not in a loop: its epoch rose by {rose}"
    );
    assert!(!site.file("w-ran").exists(), "the row waited");
    std::fs::write(site.file("release.h"), b"").expect("release");
    wait_until("the row to run once the slot is free", || {
        site.file("w-ran").exists()
    });
}

/// A member at its bound of waiting rows is refused, naming the bound, and root's enqueue is
/// still accepted; so is root's beside a member that used up the dispatcher's descriptors
/// but the reserve.
#[test]
fn a_member_at_its_row_bound_is_refused_and_root_is_still_served() {
    let site = shared_site(None);
    let _dispatcher = start(&site, &["--max-rows-per-user", "3"]);
    assert_eq!(site.code(&["stop-all", "queueing"]), 0);
    for i in 0..3 {
        let out = as_member(&site)
            .args(["enqueue", "--lane", &format!("m{i}"), "--", "true"])
            .output_gated()
            .expect("enqueue");
        assert!(
            out.status.success(),
            "row {i}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let out = as_member(&site)
        .args(["enqueue", "--lane", "m3", "--", "true"])
        .output_gated()
        .expect("enqueue");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(75), "try again later: {err}");
    assert!(
        err.contains("--max-rows-per-user 3") && err.contains(&format!("uid {MEMBER}")),
        "names the bound: {err}"
    );
    assert!(
        super::dispatcher::lane_free(&site, "m3"),
        "the refused lane is not kept"
    );
    let out = enqueue(&site, &["--lane", "root-1"], "true");
    assert!(
        out.status.success(),
        "root is not bounded: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(states(&site).len(), 4);
}

/// A dispatcher whose descriptors a member used up, but for the reserve: the member is refused
/// (naming the limit and the fix), root's enqueue is accepted and `queue ls` sees every row.
#[test]
fn the_descriptors_kept_in_reserve_serve_root_beside_a_member_that_used_the_rest() {
    let site = shared_site(None);
    // Soft and hard limit 400: the 320 kept in reserve (a full table of connections and 64
    // more) leave a member fewer than 80 rows.
    let _dispatcher = Running::new(
        site.command("sh")
            .args([
                "-c",
                r#"ulimit -n 400 && exec "$0" dispatcher --max-rows-per-user 1000"#,
            ])
            .arg(worklane_bin())
            .env("AGENT_SLOTS_DIR", site.slots())
            .env("WORKLANE_STATE_DIR", site.state())
            .env_remove("AGENT_SLOTS_CONFIG")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn_gated()
            .expect("spawn the dispatcher"),
    );
    let socket = site.slots().join("dispatcher.sock");
    wait_until("the dispatcher's socket", || {
        std::os::unix::net::UnixStream::connect(&socket).is_ok()
    });
    assert_eq!(site.code(&["stop-all", "queueing"]), 0);
    let mut accepted = 0;
    let refusal = loop {
        assert!(accepted < 400, "the member was never bounded");
        let out = as_member(&site)
            .args(["enqueue", "--lane", &format!("m{accepted}"), "--", "true"])
            .output_gated()
            .expect("enqueue");
        if !out.status.success() {
            break out;
        }
        accepted += 1;
    };
    let err = String::from_utf8_lossy(&refusal.stderr);
    assert_eq!(refusal.status.code(), Some(75), "{err}");
    assert!(
        err.contains("descriptors left") && err.contains("LimitNOFILE"),
        "says why and the fix: {err}"
    );
    assert!(accepted > 10, "the member had most of them: {accepted}");
    for i in 0..3 {
        let out = enqueue(&site, &["--lane", &format!("root-{i}")], "true");
        assert!(
            out.status.success(),
            "root's enqueue {i} from the reserve: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert_eq!(states(&site).len(), accepted + 3, "queue ls sees every row");
}

/// A member connects and closes as fast as it can, from two processes: root's `queue ls` is
/// answered every time, each within 1 s (it took up to 5 s when the loop accepted until the
/// backlog was empty; about 0.1 s now: BENCHMARKS.md has the figures).
#[test]
fn a_member_s_connection_flood_starves_no_one() {
    let site = shared_site(None);
    let _dispatcher = start(&site, &[]);
    let flood = "import socket, sys, time\n\
        end = time.time() + float(sys.argv[2])\n\
        while time.time() < end:\n\
        \x20   s = socket.socket(socket.AF_UNIX)\n\
        \x20   try:\n\
        \x20       s.connect(sys.argv[1])\n\
        \x20   except OSError:\n\
        \x20       pass\n\
        \x20   s.close()\n";
    let socket = site.slots().join("dispatcher.sock");
    let flooders: Vec<_> = (0..2)
        .map(|_| {
            site.command("setpriv")
                .args([
                    &format!("--reuid={MEMBER}"),
                    &format!("--regid={MEMBER_GID}"),
                    &format!("--groups={SHARED}"),
                    "/usr/bin/python3",
                    "-c",
                    flood,
                ])
                .arg(&socket)
                .arg("8")
                .stdin(Stdio::null())
                .spawn_gated()
                .expect("a flooder")
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let mut took = Vec::new();
    for _ in 0..8 {
        let began = Instant::now();
        let out = site.output(&["queue", "ls", "--json"]);
        took.push(began.elapsed());
        assert!(
            out.status.success(),
            "answered under the flood: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    for mut flooder in flooders {
        wait_exit(&mut flooder, "a flooder");
    }
    assert!(
        took.iter().all(|t| *t < Duration::from_secs(1)),
        "every answer within 1 s: {took:?}"
    );
}

/// One user's connections beyond the dispatcher's `--max-connections-per-user` close that
/// user's oldest, which is told the bound; another user's requests are served meanwhile.
#[test]
fn a_user_s_connections_past_its_bound_close_its_oldest_and_no_one_else_s() {
    let site = shared_site(None);
    let _dispatcher = start(&site, &["--max-connections-per-user", "3"]);
    // The member opens four silent connections, one after another, and reads what the first
    // is told.
    let script = "import socket, sys, time\n\
        conns = []\n\
        for _ in range(4):\n\
        \x20   s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); conns.append(s)\n\
        \x20   time.sleep(0.1)\n\
        conns[0].settimeout(1.5)\n\
        try:\n\
        \x20   got = conns[0].recv(65536).decode()\n\
        except OSError as e:\n\
        \x20   got = 'nothing: %s' % e\n\
        open(sys.argv[2], 'w').write(got)\n\
        time.sleep(0.5)\n";
    let socket = site.slots().join("dispatcher.sock");
    let got = site.file("out/first");
    let mut member = site
        .command("setpriv")
        .args([
            &format!("--reuid={MEMBER}"),
            &format!("--regid={MEMBER_GID}"),
            &format!("--groups={SHARED}"),
            "/usr/bin/python3",
            "-c",
            script,
        ])
        .arg(&socket)
        .arg(&got)
        .stdin(Stdio::null())
        .spawn_gated()
        .expect("the member's connections");
    let out = site.output(&["queue", "ls", "--json"]);
    assert!(
        out.status.success(),
        "root is served beside them: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    wait_exit(&mut member, "the member");
    let first = std::fs::read_to_string(&got).expect("what the first was told");
    assert!(
        first.contains(&format!("uid {MEMBER} had 3 connections"))
            && first.contains("--max-connections-per-user"),
        "the oldest is closed, naming the bound: {first}"
    );
}

/// Whether process `pid` has ended (gone, or a zombie nobody reaped yet).
fn ended(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |stat| {
        stat[stat.rfind(')').expect("comm") + 2..].starts_with('Z')
    })
}

/// A dispatcher SIGKILLed while a driver it started has not claimed: the next one halts that
/// driver (provably it: its uid and its start beside the row's admission) before it starts
/// the row again, so two drivers of one attempt never run at once.
#[test]
fn a_restarted_dispatcher_halts_the_dead_one_s_unclaimed_driver() {
    let site = Site::new(None);
    let mut first = super::dispatcher::start_crashing(&site, &[], "");
    let never = r#"echo $$ >> "$T/pids"; exec sleep 100"#;
    let out = site
        .worklane()
        .args(["enqueue", "--lane", "n", "--driver", "--", "sh", "-c"])
        .arg(driven(never))
        .output_gated()
        .expect("enqueue");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let pids = || -> Vec<u32> {
        std::fs::read_to_string(site.file("pids"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.parse().ok())
            .collect()
    };
    wait_until("the first driver", || pids().len() == 1);
    let old = pids()[0];
    let pid = rustix::process::Pid::from_raw(i32::try_from(first.id()).expect("pid")).expect("pid");
    rustix::process::kill_process(pid, rustix::process::Signal::KILL).expect("kill");
    wait_exit(&mut first, "the first dispatcher");
    assert!(!ended(old), "the driver outlives its dispatcher");
    let _second = start(&site, &[]);
    wait_until("the old driver halted", || ended(old));
    wait_until("the row's next driver", || pids().len() == 2);
    let new = pids()[1];
    assert_ne!(new, old);
    assert!(!ended(new), "one driver of the attempt runs: the new one");
}
