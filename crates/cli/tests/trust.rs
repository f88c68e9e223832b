//! A root dispatcher beside an unprivileged member of the slot directory's group (uid 65534
//! through `setpriv`), who may replace every name in the directory: nothing the member does
//! there borrows root's rights. Each test is one of issue 32's reproductions.

use super::dispatcher::{enqueue, start, states};
use super::queue_rights::{MEMBER, MEMBER_GID, SHARED, as_member, shared_site};
use super::queue_trouble::{drain, lines_of};
use super::*;
use std::io::{Read, Write};
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::os::unix::net::UnixStream;

/// Runs `sh -c SCRIPT` as the member, with `$S` the slot directory and `$O` the site's `out/`.
fn member_sh(site: &Site, script: &str) {
    let out = site
        .command("setpriv")
        .args([
            &format!("--reuid={MEMBER}"),
            &format!("--regid={MEMBER_GID}"),
            &format!("--groups={SHARED}"),
            "sh",
            "-c",
            script,
        ])
        .env("S", site.slots())
        .env("O", site.file("out"))
        .stdin(Stdio::null())
        .output_gated()
        .expect("sh as the member");
    assert!(
        out.status.success(),
        "the member's step {script:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The names in `dir`, sorted.
fn names_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .expect("list")
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .collect();
    names.sort();
    names
}

/// A directory only root may enter, holding an empty file of root's, mode 0600.
fn vault(site: &Site) -> (PathBuf, PathBuf) {
    let vault = site.file("vault");
    std::fs::create_dir(&vault).expect("vault");
    std::fs::set_permissions(&vault, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    let file = vault.join("root-file");
    std::fs::write(&file, b"").expect("root's file");
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    (vault, file)
}

/// The dispatcher's own state: its directory 0700, every database file root's and 0600, so
/// that no member reads a row (an environment, a token) or locks a file of it.
fn assert_state_private(site: &Site) {
    let meta = std::fs::metadata(site.state()).expect("the state directory");
    assert_eq!(
        (meta.uid(), meta.mode() & 0o7777),
        (0, 0o700),
        "the state directory is root's alone"
    );
    for name in ["queue.db", "queue.db-wal", "queue.db-shm"] {
        if let Ok(meta) = std::fs::symlink_metadata(site.state().join(name)) {
            assert_eq!(
                (meta.uid(), meta.mode() & 0o7777, meta.file_type().is_file()),
                (0, 0o600, true),
                "{name} is a file of root's, mode 0600"
            );
        }
    }
    assert!(
        !site.slots().join("queue.db").exists(),
        "nothing of the queue in the slot directory"
    );
}

/// A member builds a queue database of its own holding a queued row of uid 0 and puts it
/// where an older root dispatcher kept its database, in the slot directory. The dispatcher
/// never reads it: the row never runs, as root or at all, and the file is set aside (renamed
/// `queue.db.refused-<ms>`) and reported; the dispatcher serves on with a database of its own
/// in its private state directory.
#[test]
fn a_database_a_member_planted_in_the_slot_directory_runs_nothing_as_root() {
    let site = shared_site(None);
    let ran = site.file("out/ran-as");
    // A real queue database with a queued row of uid 0 whose command writes who ran it: made by
    // a root dispatcher of another site, under STOP, so that the row is still queued.
    let maker = Site::new(None);
    assert_eq!(maker.code(&["stop-all", "making a database"]), 0);
    let dispatcher = start(&maker, &[]);
    let out = enqueue(
        &maker,
        &["--lane", "planted"],
        &format!("id -u > {}", ran.display()),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    drop(dispatcher);
    // The member's own copy of it, which it puts in the slot directory.
    for name in ["queue.db", "queue.db-wal"] {
        let from = maker.state().join(name);
        if from.exists() {
            let to = site.file(&format!("out/{name}"));
            std::fs::copy(&from, &to).expect("copy");
            std::os::unix::fs::chown(&to, Some(MEMBER), Some(MEMBER_GID)).expect("chown");
        }
    }
    member_sh(
        &site,
        r#"for f in queue.db queue.db-wal; do [ ! -e "$O/$f" ] || cp "$O/$f" "$S/$f"; done"#,
    );
    assert_eq!(
        std::fs::metadata(site.slots().join("queue.db"))
            .expect("planted")
            .uid(),
        MEMBER,
        "the member's file"
    );
    let mut dispatcher = start(&site, &[]);
    let lines = lines_of(&mut dispatcher);
    // Admissions go on: root's own row runs.
    let out = enqueue(&site, &["--lane", "own"], r#"touch "$T/out/own-ran""#);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    wait_until("root's own row to run", || {
        site.file("out/own-ran").exists()
    });
    let log = drain(&lines);
    assert!(
        log.iter()
            .any(|l| l.contains("REFUSED") && l.contains(&format!("uid {MEMBER}"))),
        "the refusal is said, with why: {log:?}"
    );
    assert!(!ran.exists(), "the planted row never ran");
    let listed = site.output(&["queue", "ls", "--json"]);
    let doc: serde_json::Value = serde_json::from_slice(&listed.stdout).expect("queue ls");
    assert!(
        doc["damage"]
            .as_str()
            .is_some_and(|d| d.contains("refused") && d.contains(&format!("uid {MEMBER}"))),
        "queue ls says it too: {doc}"
    );
    assert!(
        states(&site).values().all(|r| r["lane"] != "planted"),
        "nor is it queued"
    );
    let names = names_in(&site.slots());
    assert!(
        names.iter().any(|n| n.starts_with("queue.db.refused-")),
        "the planted file is set aside for the operator: {names:?}"
    );
    assert_state_private(&site);
}

/// A symbolic link (to a root file, or to a name in a root-only directory), a FIFO or a
/// directory at the old database name is set aside, never followed, opened or written, and
/// the dispatcher starts and serves.
#[test]
fn a_link_fifo_or_directory_at_the_old_database_name_is_set_aside_and_never_followed() {
    for kind in [
        "link to a root file",
        "link to a new name",
        "fifo",
        "directory",
    ] {
        let site = shared_site(None);
        let (vault, file) = vault(&site);
        let new = vault.join("made-by-root");
        let script = match kind {
            "link to a root file" => format!(r#"ln -s {} "$S/queue.db""#, file.display()),
            "link to a new name" => format!(r#"ln -s {} "$S/queue.db""#, new.display()),
            "fifo" => r#"mkfifo "$S/queue.db""#.to_owned(),
            _ => r#"mkdir "$S/queue.db""#.to_owned(),
        };
        member_sh(&site, &script);
        let mut dispatcher = start(&site, &[]);
        let out = site.output(&["queue", "ls", "--json"]);
        assert!(
            out.status.success(),
            "{kind}: the dispatcher serves: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let meta = std::fs::metadata(&file).expect("root's file");
        assert_eq!(
            (meta.len(), meta.mode() & 0o7777, meta.uid()),
            (0, 0o600, 0),
            "{kind}: root's file untouched"
        );
        assert!(!new.exists(), "{kind}: nothing made through the link");
        let names = names_in(&site.slots());
        let aside: Vec<&String> = names
            .iter()
            .filter(|n| n.starts_with("queue.db.refused-"))
            .collect();
        assert_eq!(aside.len(), 1, "{kind}: set aside once: {names:?}");
        let moved = std::fs::symlink_metadata(site.slots().join(aside[0])).expect("moved");
        let same = match kind {
            "fifo" => moved.file_type().is_fifo(),
            "directory" => moved.is_dir(),
            _ => moved.file_type().is_symlink(),
        };
        assert!(same, "{kind}: the name itself was moved: {moved:?}");
        assert!(
            dispatcher.try_wait().expect("try_wait").is_none(),
            "{kind}: it serves on"
        );
        assert_state_private(&site);
    }
}

/// Under socket activation a member renames the socket systemd made away, puts a link to a
/// root file at its name and connects to the renamed socket, which starts the dispatcher: the
/// dispatcher narrows the mode of the socket it was given, never of what the name holds now.
#[test]
fn a_link_at_the_socket_s_name_gets_no_chmod_from_a_socket_activated_dispatcher() {
    let site = shared_site(None);
    let (_vault, victim) = vault(&site);
    let socket = site.slots().join("dispatcher.sock");
    let moved = site.slots().join("moved.sock");
    // As systemd does (bind with a mode for everyone, listen, pass it as descriptor 3 with
    // LISTEN_PID and LISTEN_FDS); the member acts between the bind and the dispatcher's start.
    let script = "import os, socket, subprocess, sys\n\
        s = socket.socket(socket.AF_UNIX)\n\
        s.bind(sys.argv[1]); os.chmod(sys.argv[1], 0o666); s.listen(16)\n\
        subprocess.run(sys.argv[3:], check=True)\n\
        os.dup2(s.fileno(), 3); os.set_inheritable(3, True)\n\
        os.environ['LISTEN_PID'] = str(os.getpid()); os.environ['LISTEN_FDS'] = '1'\n\
        os.execv(sys.argv[2], [sys.argv[2], 'dispatcher'])\n";
    let mut dispatcher = Running::new(
        site.command("python3")
            .args(["-c", script])
            .arg(&socket)
            .arg(worklane_bin())
            .args([
                "setpriv",
                &format!("--reuid={MEMBER}"),
                &format!("--regid={MEMBER_GID}"),
                &format!("--groups={SHARED}"),
                "sh",
                "-c",
                r#"mv "$S/dispatcher.sock" "$S/moved.sock" && ln -s "$V" "$S/dispatcher.sock""#,
            ])
            .env("S", site.slots())
            .env("V", &victim)
            .env("AGENT_SLOTS_DIR", site.slots())
            .env("WORKLANE_STATE_DIR", site.state())
            .env_remove("AGENT_SLOTS_CONFIG")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn_gated()
            .expect("python3 as systemd"),
    );
    let lines = lines_of(&mut dispatcher);
    wait_until("the dispatcher serving on the renamed socket", || {
        let Ok(mut stream) = UnixStream::connect(&moved) else {
            return false;
        };
        let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
        if stream.write_all(b"{\"op\":\"list\"}\n").is_err() {
            return false;
        }
        let mut reply = String::new();
        let _ = stream.read_to_string(&mut reply);
        reply.contains("\"ok\":true")
    });
    let log = drain(&lines);
    let meta = std::fs::metadata(&victim).expect("victim");
    assert_eq!(
        meta.mode() & 0o7777,
        0o600,
        "the link's target keeps its mode: {log:?}"
    );
    assert!(
        log.iter().any(|l| l.contains("left as it is")),
        "it says it left the name alone: {log:?}"
    );
    assert!(
        std::fs::symlink_metadata(&socket)
            .expect("the link")
            .file_type()
            .is_symlink(),
        "the member's link is still a link"
    );
}

/// A dispatcher started with a descriptor open on a root-only file (its parent shell's fd 7)
/// hands none of its descriptors to a member's driver: the driver has 0, 1 and 2 alone.
#[test]
fn a_member_s_driver_inherits_no_descriptor_of_the_dispatcher_s() {
    let site = shared_site(None);
    let (_vault, secret) = vault(&site);
    std::fs::write(&secret, b"root's secret\n").expect("secret");
    let dispatcher = Running::new(
        site.command("sh")
            .args(["-c", r#"exec 7<>"$SECRET" && exec "$0" dispatcher"#])
            .arg(worklane_bin())
            .env("SECRET", &secret)
            .env("AGENT_SLOTS_DIR", site.slots())
            .env("WORKLANE_STATE_DIR", site.state())
            .env_remove("AGENT_SLOTS_CONFIG")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn_gated()
            .expect("a dispatcher with fd 7 open"),
    );
    let socket = site.slots().join("dispatcher.sock");
    wait_until("the dispatcher's socket", || {
        UnixStream::connect(&socket).is_ok()
    });
    let fds = std::fs::read_dir(format!("/proc/{}/fd", dispatcher.id()))
        .expect("the dispatcher's descriptors")
        .flatten()
        .filter_map(|e| std::fs::read_link(e.path()).ok())
        .any(|target| target == secret);
    assert!(fds, "the dispatcher itself has the file open (the premise)");
    // The shell's own descriptors, listed by a child into the attempt's log (its standard
    // output) while the shell holds nothing else: a redirection or a pipeline would have the
    // shell hold a saved descriptor or its pipes for a moment.
    let script = r#"ls /proc/$$/fd; echo listed"#;
    let out = as_member(&site)
        .args([
            "enqueue", "--lane", "fds", "--driver", "--", "sh", "-c", script,
        ])
        .output_gated()
        .expect("enqueue");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let attempt = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    let log = site.slots().join(format!("queue-{attempt}.log"));
    wait_until("the driver's list", || {
        std::fs::read_to_string(&log).is_ok_and(|l| l.contains("\nlisted\n"))
    });
    let listed = std::fs::read_to_string(&log).expect("log");
    let mut fds: Vec<u32> = listed.lines().filter_map(|l| l.parse().ok()).collect();
    fds.sort_unstable();
    assert_eq!(fds, [0, 1, 2], "only the standard streams reach the driver");
    assert_eq!(
        std::fs::read(&secret).expect("secret"),
        b"root's secret\n",
        "untouched"
    );
    drop(dispatcher);
}

/// A member writes a cancel marker for root's running attempt (a cancel the socket would
/// refuse it): `worklane claim` ignores it, saying so, and the command runs on; root's own
/// `queue cancel` halts it.
#[test]
fn a_cancel_marker_a_member_wrote_halts_nothing() {
    let site = shared_site(None);
    let _dispatcher = start(&site, &[]);
    let beat = r#"touch "$T/out/up"; while :; do touch "$T/out/beat"; sleep 0.05; done"#;
    let out = enqueue(&site, &["--lane", "root-r"], beat);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let attempt = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    wait_until("root's command to run", || site.file("out/up").exists());
    let marker = format!(
        r#"{{"version": 1, "attempt": "{attempt}", "by": 0, "at": "2026-12-06T00:00:00.000Z", "reason": "queue cancel"}}"#
    );
    member_sh(
        &site,
        &format!("printf '%s\\n' '{marker}' > \"$S/queue-{attempt}.cancel\""),
    );
    let log = site.slots().join(format!("queue-{attempt}.log"));
    wait_until("the claim to say it ignores the marker", || {
        std::fs::read_to_string(&log).is_ok_and(|l| l.contains("ignoring"))
    });
    let said = std::fs::read_to_string(&log).expect("log");
    assert!(
        said.contains(&format!("owner uid {MEMBER}")),
        "it names who wrote it: {said}"
    );
    // Still running, and still beating after the marker was seen.
    std::fs::remove_file(site.file("out/beat")).expect("beat");
    wait_until("a beat after the marker", || site.file("out/beat").exists());
    assert_eq!(
        states(&site)[&attempt]["state"],
        "running",
        "the attempt runs on"
    );
    let out = site.output(&["queue", "cancel", &attempt]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    wait_until("root's cancel to end it", || {
        !states(&site).contains_key(&attempt)
    });
}

/// A member serves a socket of its own at the dispatcher's name: root's `enqueue` checks who
/// serves it before sending anything, so the member gets no byte, no descriptor (the lane's
/// guard) and no command, and root is told why.
#[test]
fn root_sends_nothing_to_a_socket_a_member_serves() {
    let site = shared_site(None);
    // The member's server: accepts one connection, records what came (bytes and descriptors).
    let script = "import os, socket, sys\n\
        s = socket.socket(socket.AF_UNIX); s.bind(sys.argv[1]); s.listen(4)\n\
        open(sys.argv[2] + '.up', 'w').close()\n\
        c, _ = s.accept(); c.settimeout(3)\n\
        got, fds = b'', []\n\
        try:\n\
        \x20   msg, fds, _, _ = socket.recv_fds(c, 65536, 4)\n\
        \x20   got = msg\n\
        except Exception:\n\
        \x20   pass\n\
        open(sys.argv[2], 'w').write('%d bytes, %d fds' % (len(got), len(fds)))\n";
    let socket = site.slots().join("dispatcher.sock");
    let got = site.file("out/got");
    let mut fake = site
        .command("setpriv")
        .args([
            &format!("--reuid={MEMBER}"),
            &format!("--regid={MEMBER_GID}"),
            &format!("--groups={SHARED}"),
            // From a path any user reads (a pyenv shim under /root is not).
            "/usr/bin/python3",
            "-c",
            script,
        ])
        .arg(&socket)
        .arg(&got)
        .stdin(Stdio::null())
        .spawn_gated()
        .expect("the member's server");
    wait_until("the member's server", || site.file("out/got.up").exists());
    let out = enqueue(&site, &["--lane", "root-f"], r#"touch "$T/out/f-ran""#);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(69), "refused: {err}");
    assert!(
        err.contains(&format!("served by uid {MEMBER}")) && err.contains("nothing was sent"),
        "says why: {err}"
    );
    wait_exit(&mut fake, "the member's server");
    assert_eq!(
        std::fs::read_to_string(&got).expect("what the member got"),
        "0 bytes, 0 fds",
        "nothing reached the member"
    );
    assert!(
        super::dispatcher::lane_free(&site, "root-f"),
        "root's lane is free again"
    );
}

/// The state (`R`, `S`, `T`...) and the start time (clock ticks since boot) of `pid`.
fn state_and_start(pid: u32) -> (char, u64) {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("stat");
    let after: Vec<&str> = stat[stat.rfind(')').expect("comm") + 2..]
        .split_whitespace()
        .collect();
    let state = after[0].chars().next().expect("state");
    // Field 22 of the line is the 20th after the command's.
    (state, after[19].parse().expect("start"))
}

/// A member writes a record naming a stopped process of root's, with its true pid, start
/// time and place: root's `stop-all`, which continues a stopped supervisor so that it halts
/// its command, continues no process its record's writer does not own.
#[test]
fn stop_all_continues_no_stopped_process_a_member_s_record_names() {
    let site = shared_site(None);
    // A record as worklane writes it, for its place.
    let holder = site.spawn(&["run"], HOLD, "h");
    wait_until("the holder's command", || site.file("up.h").exists());
    let slot = names_in(&site.slots())
        .into_iter()
        .find(|n| n.starts_with("agent-") && n.ends_with(".lock"))
        .expect("the holder's slot");
    let record: serde_json::Value =
        serde_json::from_slice(&std::fs::read(site.slots().join(&slot)).expect("record"))
            .expect("json");
    std::fs::write(site.file("release.h"), b"").expect("release");
    drop(holder);
    // Root's process, stopped (by a debugger, say).
    let mut victim = site
        .command("sleep")
        .arg("60")
        .spawn_gated()
        .expect("root's process");
    let pid =
        rustix::process::Pid::from_raw(i32::try_from(victim.id()).expect("pid")).expect("pid");
    rustix::process::kill_process(pid, rustix::process::Signal::STOP).expect("stop it");
    wait_until("the victim stopped", || {
        state_and_start(victim.id()).0 == 'T'
    });
    let mut forged = record.clone();
    forged["pid"] = victim.id().into();
    forged["identity"]["start"] = state_and_start(victim.id()).1.into();
    if let Some(fields) = forged.as_object_mut() {
        fields.remove("commandProcess");
    }
    std::fs::write(site.file("out/forged.json"), forged.to_string()).expect("forged");
    member_sh(&site, r#"cp "$O/forged.json" "$S/lane-forged.lock""#);
    let out = site.output(&["stop-all", "a member's record"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        state_and_start(victim.id()).0,
        'T',
        "root's stopped process stays stopped"
    );
    victim.kill().expect("kill");
    victim.wait().expect("reap");
}

/// Whatever a member puts at the log name of another user's queued attempt (a file of its
/// own, a link to a root file, a FIFO) fails no start: it is renamed aside, never written,
/// and the attempt runs with a log of its own.
#[test]
fn a_file_a_member_put_at_another_s_log_name_fails_no_start() {
    for kind in ["a file of the member's", "a link to a root file", "a FIFO"] {
        let site = shared_site(None);
        let (_vault, file) = vault(&site);
        let _dispatcher = start(&site, &[]);
        assert_eq!(site.code(&["stop-all", "queueing"]), 0);
        let out = enqueue(&site, &["--lane", "v"], r#"touch "$T/out/v-ran""#);
        assert!(
            out.status.success(),
            "{kind}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let attempt = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        let script = match kind {
            "a file of the member's" => r#"echo planted > "$S/queue-$A.log""#.to_owned(),
            "a link to a root file" => format!(r#"ln -s {} "$S/queue-$A.log""#, file.display()),
            _ => r#"mkfifo "$S/queue-$A.log""#.to_owned(),
        };
        member_sh(&site, &format!("A={attempt}; {script}"));
        assert_eq!(site.code(&["resume-all"]), 0);
        wait_until("the attempt to run", || site.file("out/v-ran").exists());
        let log = site.slots().join(format!("queue-{attempt}.log"));
        let meta = std::fs::symlink_metadata(&log).expect("its log");
        assert!(
            meta.is_file() && meta.uid() == 0,
            "{kind}: a log of the attempt's own: {meta:?}"
        );
        assert!(
            std::fs::read_to_string(&log)
                .expect("log")
                .contains(&format!("start 1 of attempt {attempt}")),
            "{kind}: written by its start"
        );
        assert!(
            names_in(&site.slots())
                .iter()
                .any(|n| n.starts_with(&format!("queue-{attempt}.log.refused-"))),
            "{kind}: the planted name set aside"
        );
        assert_eq!(
            std::fs::read(&file).expect("root's file"),
            b"",
            "{kind}: nothing written through the link"
        );
    }
}

/// A root dispatcher gives a member's attempt its log, and still appends the attempt's end
/// to it.
#[test]
fn the_end_of_a_member_s_attempt_is_appended_to_its_log() {
    let site = shared_site(None);
    let _dispatcher = start(&site, &[]);
    let out = as_member(&site)
        .args(["enqueue", "--lane", "e", "--", "true"])
        .output_gated()
        .expect("enqueue");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let attempt = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    let log = site.slots().join(format!("queue-{attempt}.log"));
    wait_until("the end in the log", || {
        std::fs::read_to_string(&log)
            .is_ok_and(|l| l.contains(&format!("attempt {attempt} exited")))
    });
    assert_eq!(
        std::fs::metadata(&log).expect("log").uid(),
        MEMBER,
        "the member's log"
    );
}

/// A file, a link (to a root file) or a FIFO a member put at the socket's name stops no
/// dispatcher from starting: it is renamed aside, said, and the socket made at the name.
#[test]
fn a_file_a_member_put_at_the_socket_s_name_stops_no_dispatcher() {
    for kind in ["a file", "a link to a root file", "a FIFO"] {
        let site = shared_site(None);
        let (_vault, file) = vault(&site);
        let script = match kind {
            "a file" => r#"echo planted > "$S/dispatcher.sock""#.to_owned(),
            "a link to a root file" => {
                format!(r#"ln -s {} "$S/dispatcher.sock""#, file.display())
            }
            _ => r#"mkfifo "$S/dispatcher.sock""#.to_owned(),
        };
        member_sh(&site, &script);
        let mut dispatcher = Running::new(
            site.worklane()
                .arg("dispatcher")
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn_gated()
                .expect("the dispatcher"),
        );
        let lines = lines_of(&mut dispatcher);
        wait_until("the dispatcher serving", || {
            site.output(&["queue", "ls", "--json"]).status.success()
        });
        let log = drain(&lines);
        assert!(
            log.iter().any(|l| l.contains("was not a socket")),
            "{kind}: said: {log:?}"
        );
        assert!(
            names_in(&site.slots())
                .iter()
                .any(|n| n.starts_with("dispatcher.sock.refused-")),
            "{kind}: set aside"
        );
        let meta = std::fs::metadata(&file).expect("root's file");
        assert_eq!(
            (meta.len(), meta.mode() & 0o7777),
            (0, 0o600),
            "{kind}: untouched"
        );
    }
}

/// A member puts an entry in the full-run line whose record names a process of root's as a
/// queued full run's runner (its true pid and start), and holds the entry's guard so that it
/// counts as live: root's `queue cancel fr-<pid>` signals nothing, and says why.
#[test]
fn a_queued_full_run_a_member_forged_gets_no_signal_sent_to_root_s_process() {
    let site = shared_site(None);
    // A record as worklane writes it, for its place.
    let holder = site.spawn(&["run"], HOLD, "h");
    wait_until("the holder's command", || site.file("up.h").exists());
    let slot = names_in(&site.slots())
        .into_iter()
        .find(|n| n.starts_with("agent-") && n.ends_with(".lock"))
        .expect("the holder's slot");
    let record: serde_json::Value =
        serde_json::from_slice(&std::fs::read(site.slots().join(&slot)).expect("record"))
            .expect("json");
    std::fs::write(site.file("release.h"), b"").expect("release");
    drop(holder);
    let mut victim = site
        .command("sleep")
        .arg("60")
        .spawn_gated()
        .expect("root's process");
    let mut forged = record.clone();
    forged["pid"] = victim.id().into();
    forged["owner"] = "queued full run".into();
    forged["identity"]["start"] = state_and_start(victim.id()).1.into();
    std::fs::write(site.file("out/forged.json"), forged.to_string()).expect("forged");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("now")
        .as_millis();
    let entry = format!("line-full-run.0.{now}.0123456789abcdef");
    member_sh(
        &site,
        &format!(r#"cp "$O/forged.json" "$S/{entry}" && : > "$S/.{entry}.flock""#),
    );
    let _keeper = Running::new(
        site.command("setpriv")
            .args([
                &format!("--reuid={MEMBER}"),
                &format!("--regid={MEMBER_GID}"),
                &format!("--groups={SHARED}"),
                "flock",
                // Waiting: the probe below holds the lock for a moment while it looks.
                "-w",
                "30",
            ])
            .arg(site.slots().join(format!(".{entry}.flock")))
            .args(["sleep", "60"])
            .stdin(Stdio::null())
            .spawn_gated()
            .expect("the member holds the entry's guard"),
    );
    // Held before anyone looks: an entry whose guard is free is a dead waiter's, retired at
    // the first look.
    wait_until("the member's lock on the entry's guard", || {
        site.command("flock")
            .arg("-n")
            .arg(site.slots().join(format!(".{entry}.flock")))
            .arg("true")
            .output_gated()
            .is_ok_and(|o| !o.status.success())
    });
    let id = format!("fr-{}", victim.id());
    wait_until("the forged entry listed as a waiting run", || {
        let out = site.output(&["queue", "ls", "--json"]);
        String::from_utf8_lossy(&out.stdout).contains(&format!("\"{id}\""))
    });
    let out = site.output(&["queue", "cancel", &id]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(69), "refused: {err}");
    assert!(
        err.contains("nothing was signalled") && err.contains(&format!("uid {MEMBER}")),
        "says why: {err}"
    );
    std::thread::sleep(Duration::from_millis(100));
    assert!(
        victim.try_wait().expect("try_wait").is_none(),
        "root's process was not signalled"
    );
    victim.kill().expect("kill");
    victim.wait().expect("reap");
}
