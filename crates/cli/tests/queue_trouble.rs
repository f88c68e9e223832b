use super::dispatcher::{enqueue, start, start_crashing, states};
use super::*;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::os::unix::process::ExitStatusExt;

/// How long `queue ls` took, and its output.
fn timed_ls(site: &Site) -> (Duration, Output) {
    let began = Instant::now();
    let out = site.output(&["queue", "ls", "--json"]);
    (began.elapsed(), out)
}

/// 200 connections that never send and a client that sends a byte every 1.5 s hold
/// nothing up: `queue ls` is answered at once and a row enqueued meanwhile is admitted
/// and its driver started at once. (The bound asserted, 1.5 s, is generous: under the
/// 2 s each silent connection was once allowed, one after another, and far above the
/// few milliseconds it takes: 6.5 ms for `queue ls`, 33 ms from enqueue to the driver,
/// measured on the development machine.)
#[test]
fn silent_and_slow_connections_do_not_hold_the_queue() {
    let site = Site::new(Some(r#"{"max_agents": 2}"#));
    let _dispatcher = start(&site, &[]);
    let socket = site.slots().join("dispatcher.sock");
    let silent: Vec<UnixStream> = (0..200)
        .map(|_| UnixStream::connect(&socket).expect("connect"))
        .collect();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let loris = {
        let socket = socket.clone();
        let stop = std::sync::Arc::clone(&stop);
        std::thread::spawn(move || {
            let mut sent = 0;
            let mut stream = UnixStream::connect(&socket).expect("connect");
            for byte in br#"{"op":"list"}"#.iter().cycle() {
                if stop.load(std::sync::atomic::Ordering::SeqCst) {
                    break;
                }
                if stream.write_all(&[*byte]).is_err() {
                    // Cut off by the whole-message deadline: a new one starts over.
                    stream = UnixStream::connect(&socket).expect("connect");
                }
                sent += 1;
                for _ in 0..15 {
                    if stop.load(std::sync::atomic::Ordering::SeqCst) {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(100));
                }
            }
            sent
        })
    };
    std::thread::sleep(Duration::from_millis(300));
    let (took, out) = timed_ls(&site);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        took < Duration::from_millis(1500),
        "answered at once, not after them: {took:?}"
    );
    let began = Instant::now();
    let out = enqueue(&site, &["--lane", "now"], r#"touch "$T/admitted""#);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    wait_until("the row's driver", || site.file("admitted").exists());
    let took = began.elapsed();
    assert!(
        took < Duration::from_millis(1500),
        "admitted on time: {took:?}"
    );
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let _ = loris.join();
    drop(silent);
}

/// A peer outside the directory's group is refused at accept, before it sends anything,
/// so silent strangers cannot hold root's requests.
#[test]
fn a_stranger_is_refused_at_once_without_a_word_of_its_own() {
    use std::os::unix::fs::PermissionsExt;
    let site = Site::new(None);
    let _dispatcher = start(&site, &[]);
    let socket = site.slots().join("dispatcher.sock");
    // Let the stranger reach the socket, to test the check behind the mode.
    std::fs::set_permissions(site.temp.path(), std::fs::Permissions::from_mode(0o755))
        .expect("chmod");
    std::fs::set_permissions(site.slots(), std::fs::Permissions::from_mode(0o2755)).expect("chmod");
    std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o666)).expect("chmod");
    let script = "import socket,sys,json\n\
            conns=[]\n\
            for _ in range(5):\n\
            \x20   s=socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); s.settimeout(5); conns.append(s)\n\
            for s in conns:\n\
            \x20   print(json.loads(s.makefile().readline()).get('error'))\n";
    let strangers = site
        .command("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .args(["/usr/bin/python3", "-c", script])
        .arg(&socket)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn_gated()
        .expect("python3 as a stranger");
    let (took, out) = timed_ls(&site);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        took < Duration::from_millis(1500),
        "root is answered at once: {took:?}"
    );
    let strangers = strangers.wait_with_output().expect("strangers");
    assert!(
        strangers.status.success(),
        "each stranger heard its refusal without sending: {}",
        String::from_utf8_lossy(&strangers.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&strangers.stdout),
        "permission\n".repeat(5),
        "refused, each"
    );
}

/// A tmpfs of `size` mounted over `at` (mode 2770), unmounted when dropped: a disk that
/// can be filled.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(at: &Path, size: &str) -> Tmpfs {
        assert!(
            rustix::process::geteuid().is_root(),
            "mounting a tmpfs needs root"
        );
        let status = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size},mode=2770"),
                "tmpfs",
            ])
            .arg(at)
            .status_gated()
            .expect("mount");
        assert!(status.success(), "mount a tmpfs at {}", at.display());
        Tmpfs(at.to_owned())
    }

    /// Writes `fill` until the disk is full.
    fn fill(&self) -> PathBuf {
        let path = self.0.join("fill");
        let mut file = std::fs::File::create(&path).expect("fill");
        let chunk = vec![0u8; 64 * 1024];
        loop {
            match file.write(&chunk) {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) => {
                    assert_eq!(e.raw_os_error(), Some(28), "full: {e}");
                    break;
                }
            }
        }
        path
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status_gated();
    }
}

/// The lines the dispatcher writes on its stderr, as they come.
pub(super) fn lines_of(running: &mut Running) -> std::sync::mpsc::Receiver<String> {
    let stderr = running.stderr.take().expect("stderr");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

pub(super) fn drain(lines: &std::sync::mpsc::Receiver<String>) -> Vec<String> {
    let mut all = Vec::new();
    while let Ok(line) = lines.recv_timeout(Duration::from_millis(300)) {
        all.push(line);
    }
    all
}

const COUNT: &str = r#"echo "$WORKLANE_ATTEMPT" >> "$T/ran""#;

fn ran(site: &Site) -> Vec<String> {
    std::fs::read_to_string(site.file("ran"))
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// With the disk full while rows wait, the dispatcher keeps serving and holding its
/// lanes, says what fails (its log, `queue ls`), and once space returns runs every row
/// exactly once.
#[test]
fn a_full_disk_is_survived_and_said_and_nothing_is_lost_or_run_twice() {
    let site = Site::new(None);
    let disk = Tmpfs::mount(&site.slots(), "4m");
    std::fs::write(site.slots().join("config.json"), r#"{"max_agents": 1}"#).expect("config");
    let mut dispatcher = start(&site, &[]);
    let lines = lines_of(&mut dispatcher);
    assert_eq!(site.code(&["stop-all", "hold"]), 0);
    let mut ids = Vec::new();
    for lane in ["f0", "f1", "f2"] {
        let out = enqueue(&site, &["--lane", lane], COUNT);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        ids.push(String::from_utf8_lossy(&out.stdout).trim().to_owned());
    }
    let fill = disk.fill();
    assert_eq!(
        site.code(&["resume-all"]),
        0,
        "STOP is lifted on a full disk"
    );
    let mut troubled = None;
    wait_until("the dispatcher to report its trouble", || {
        let out = site.output(&["queue", "ls", "--json"]);
        let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        troubled = doc["trouble"].as_str().map(str::to_owned);
        troubled.is_some()
    });
    let troubled = troubled.expect("trouble");
    assert!(
        troubled.contains("No space left on device"),
        "says why: {troubled}"
    );
    let shown = site.output(&["queue", "ls"]);
    assert!(
        String::from_utf8_lossy(&shown.stdout).contains("TROUBLE: "),
        "and says it to a person: {}",
        String::from_utf8_lossy(&shown.stdout)
    );
    assert!(
        dispatcher.try_wait().expect("try_wait").is_none(),
        "it serves on"
    );
    let why = site.output(&["why", "--json"]);
    let why: serde_json::Value = serde_json::from_slice(&why.stdout).expect("why --json");
    assert!(
        why["queued"].as_array().is_some_and(|q| !q.is_empty()
            && q.iter().all(|e| e["held_by"].as_str().is_some_and(|h| h
                .contains("cannot admit work now")
                && h.contains("No space left")))),
        "why names the dispatcher's trouble for each waiting row: {why}"
    );
    assert!(ran(&site).is_empty(), "nothing ran while the disk was full");
    for lane in ["f0", "f1", "f2"] {
        assert!(
            !super::dispatcher::lane_free(&site, lane),
            "it holds lane {lane}"
        );
    }
    std::fs::remove_file(fill).expect("free the disk");
    wait_until("all three to run", || ran(&site).len() == 3);
    wait_until("their rows to end", || states(&site).is_empty());
    let mut got = ran(&site);
    got.sort();
    ids.sort();
    assert_eq!(got, ids, "each row ran exactly once");
    let log = drain(&lines);
    let said = log
        .iter()
        .filter(|l| l.contains("No space left on device"))
        .count();
    assert!(said >= 1, "the log says it: {log:?}");
    assert!(said <= 4, "a few lines, not one per try: {log:?}");
    assert!(
        dispatcher.try_wait().expect("try_wait").is_none(),
        "still serving"
    );
    drop(dispatcher);
}

/// How a test damages the queue database of a dispatcher it stopped.
#[derive(Debug, Clone, Copy)]
enum Damage {
    /// Emptied (after a clean stop: no WAL).
    Emptied,
    /// Its every byte replaced by random ones (after a clean stop).
    Garbage,
    /// Random bytes over its second page and on (after a clean stop).
    Pages,
    /// Random bytes written into its WAL's frames (after a SIGKILL: the rows are there).
    WalBytes,
    /// Its WAL replaced by garbage (after a SIGKILL).
    WalReplaced,
    /// One byte of its WAL's second frame flipped (after a SIGKILL): SQLite would drop that
    /// frame and every later one.
    WalFrame,
}

fn random_bytes(n: usize) -> Vec<u8> {
    let mut bytes = vec![0u8; n];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .expect("urandom");
    bytes
}

fn damage(db: &Path, how: Damage) {
    use std::os::unix::fs::FileExt;
    let wal = db.with_file_name("queue.db-wal");
    match how {
        Damage::Emptied => std::fs::write(db, b"").expect("empty"),
        Damage::Garbage => {
            let len = std::fs::metadata(db).expect("db").len();
            std::fs::write(db, random_bytes(usize::try_from(len).expect("len"))).expect("garbage");
        }
        Damage::Pages => {
            let len = std::fs::metadata(db).expect("db").len();
            assert!(len > 4096, "more than one page: {len}");
            let file = std::fs::OpenOptions::new()
                .write(true)
                .open(db)
                .expect("db");
            file.write_all_at(
                &random_bytes(usize::try_from(len - 4096).expect("len")),
                4096,
            )
            .expect("pages");
        }
        Damage::WalBytes => {
            let len = std::fs::metadata(&wal).expect("a WAL after SIGKILL").len();
            let file = std::fs::OpenOptions::new()
                .write(true)
                .open(&wal)
                .expect("wal");
            file.write_all_at(&random_bytes(usize::try_from(len - 32).expect("len")), 32)
                .expect("frames");
        }
        Damage::WalReplaced => {
            let len = std::fs::metadata(&wal).expect("a WAL after SIGKILL").len();
            std::fs::write(&wal, random_bytes(usize::try_from(len).expect("len")))
                .expect("replace");
        }
        Damage::WalFrame => {
            let mut bytes = std::fs::read(&wal).expect("a WAL after SIGKILL");
            let page = u32::from_be_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]);
            let page = usize::try_from(page).expect("page size");
            let at = 32 + (24 + page) + 24 + page / 2;
            assert!(
                bytes.len() > 32 + 3 * (24 + page),
                "frames after the second"
            );
            bytes[at] ^= 0x01;
            std::fs::write(&wal, &bytes).expect("flip a byte");
            std::fs::write(wal.with_file_name("flipped-wal"), &bytes).expect("keep");
        }
    }
}

/// After each kind of damage to the queue database, the restarted dispatcher says so
/// loudly, moves a database it finds damaged aside (never deletes it), and accounts for
/// every row: recovered and run, or listed as lost with its arguments; no status entry is
/// left naming the dead dispatcher, and a lost lane can be enqueued again.
#[test]
fn a_damaged_queue_database_is_said_moved_aside_and_its_rows_accounted_for() {
    for how in [
        Damage::Emptied,
        Damage::Garbage,
        Damage::Pages,
        Damage::WalBytes,
        Damage::WalReplaced,
        Damage::WalFrame,
    ] {
        damaged(how);
    }
}

fn damaged(how: Damage) {
    let site = Site::new(Some(r#"{"max_agents": 1}"#));
    let clean = matches!(how, Damage::Emptied | Damage::Garbage | Damage::Pages);
    let mut first = if clean {
        start(&site, &[])
    } else {
        // Killed where nothing checkpoints the WAL: the rows are in it.
        start_crashing(&site, &[], "")
    };
    assert_eq!(site.code(&["stop-all", "hold"]), 0);
    let mut ids = Vec::new();
    for i in 0..3 {
        let out = enqueue(&site, &["--lane", &format!("d{i}")], COUNT);
        assert!(
            out.status.success(),
            "{how:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        ids.push(String::from_utf8_lossy(&out.stdout).trim().to_owned());
    }
    let pid = rustix::process::Pid::from_raw(i32::try_from(first.id()).expect("pid")).expect("pid");
    let signal = if clean {
        rustix::process::Signal::TERM
    } else {
        rustix::process::Signal::KILL
    };
    rustix::process::kill_process(pid, signal).expect("stop the dispatcher");
    let status = wait_exit(&mut first, "the first dispatcher");
    assert!(
        clean == status.success() || status.signal() == Some(9),
        "{how:?}: {status:?}"
    );
    damage(&site.state().join("queue.db"), how);
    let mut second = start(&site, &[]);
    let lines = lines_of(&mut second);
    assert_eq!(site.code(&["resume-all"]), 0);
    let out = site.output(&["queue", "ls", "--all", "--json"]);
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("queue ls");
    let history = doc["history"].as_array().cloned().unwrap_or_default();
    let lost: Vec<&serde_json::Value> = history.iter().filter(|e| e["outcome"] == "lost").collect();
    let listed: Vec<String> = doc["attempts"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|a| a["attempt"].as_str().map(str::to_owned))
        .collect();
    for id in &ids {
        let is_lost = lost.iter().any(|e| e["attempt"] == id.as_str());
        let was_run = ran(&site).contains(id)
            || history
                .iter()
                .any(|e| e["attempt"] == id.as_str() && e["outcome"] != "lost");
        assert!(
            listed.contains(id) || is_lost || was_run,
            "{how:?}: attempt {id} is neither kept nor said lost: {doc}"
        );
    }
    for entry in &lost {
        assert!(
            entry["args"]
                .as_array()
                .is_some_and(|a| a.iter().any(|v| v == "claim")),
            "{how:?}: a lost attempt names its command: {entry}"
        );
        let lane = entry["lane"].as_str().expect("lane");
        assert!(
            !site.slots().join(format!("queue-{lane}.json")).exists(),
            "{how:?}: no stale status entry for lost lane {lane}"
        );
        let again = enqueue(&site, &["--lane", lane], COUNT);
        assert!(
            again.status.success(),
            "{how:?}: lost lane {lane} can be enqueued again: {}",
            String::from_utf8_lossy(&again.stderr)
        );
    }
    let moved: Vec<String> = std::fs::read_dir(site.state())
        .expect("list")
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| n.starts_with("queue.db.damaged-"))
        .collect();
    let log = drain(&lines);
    if !lost.is_empty() {
        assert!(
            log.iter().any(|l| l.contains("LOST attempt")),
            "{how:?}: the log says what was lost: {log:?}"
        );
    }
    if matches!(how, Damage::Garbage | Damage::Pages) {
        assert!(
            !moved.is_empty(),
            "{how:?}: the damaged database is moved aside"
        );
        assert!(
            log.iter().any(|l| l.contains("DAMAGED")) && doc["damage"].is_string(),
            "{how:?}: and said so, in the log and in queue ls: {log:?} {doc}"
        );
        assert_eq!(
            lost.len(),
            3,
            "{how:?}: its three rows are lost, and said: {doc}"
        );
    }
    if matches!(how, Damage::WalFrame) {
        let copies: Vec<String> = std::fs::read_dir(site.state())
            .expect("list")
            .flatten()
            .filter_map(|e| e.file_name().into_string().ok())
            .filter(|n| n.starts_with("queue.db-wal.damaged-"))
            .collect();
        assert_eq!(
            copies.len(),
            1,
            "{how:?}: a copy of the log is kept: {copies:?}"
        );
        assert_eq!(
            std::fs::read(site.state().join(&copies[0])).expect("copy"),
            std::fs::read(site.state().join("flipped-wal")).expect("flipped"),
            "{how:?}: as it was before SQLite replayed it"
        );
        assert!(
            log.iter()
                .any(|l| l.contains("DAMAGED") && l.contains("write-ahead log"))
                && doc["damage"]
                    .as_str()
                    .is_some_and(|d| d.contains("write-ahead log")),
            "{how:?}: said, in the log and in queue ls: {log:?} {doc}"
        );
        assert!(
            moved.is_empty(),
            "{how:?}: the database itself stays in use"
        );
    }
    if matches!(how, Damage::Emptied | Damage::WalReplaced) {
        assert_eq!(
            lost.len() + listed.len(),
            3,
            "{how:?}: each row accounted for: {doc}"
        );
    }
    wait_until("the recovered and re-enqueued rows to run", || {
        states(&site).is_empty()
    });
    let mut got = ran(&site);
    got.sort();
    got.dedup();
    assert_eq!(got.len(), ran(&site).len(), "{how:?}: nothing ran twice");
    drop(second);
}

/// A socket systemd passes (socket activation) with a mode that lets anyone connect is
/// narrowed to the directory's group before the dispatcher serves on it, and it says so.
#[test]
fn a_passed_socket_that_others_may_use_is_narrowed_before_serving() {
    use std::os::unix::fs::PermissionsExt;
    let site = Site::new(None);
    let socket = site.slots().join("dispatcher.sock");
    // As systemd does: bind, listen, pass as descriptor 3 with LISTEN_PID and LISTEN_FDS.
    let script = "import os, socket, sys\n\
            s = socket.socket(socket.AF_UNIX)\n\
            s.bind(sys.argv[1]); os.chmod(sys.argv[1], 0o666); s.listen(16)\n\
            os.dup2(s.fileno(), 3); os.set_inheritable(3, True)\n\
            os.environ['LISTEN_PID'] = str(os.getpid()); os.environ['LISTEN_FDS'] = '1'\n\
            os.execv(sys.argv[2], [sys.argv[2], 'dispatcher'])\n";
    let mut dispatcher = Running::new(
        site.command("python3")
            .args(["-c", script])
            .arg(&socket)
            .arg(worklane_bin())
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
    wait_until("the dispatcher on the passed socket", || {
        timed_ls(&site).1.status.success()
            && std::fs::metadata(&socket).is_ok_and(|m| m.permissions().mode() & 0o777 == 0o660)
    });
    let log = drain(&lines);
    assert!(
        log.iter()
            .any(|l| l.contains("had mode 0666") && l.contains("SocketMode=0660")),
        "it says what it changed and what the unit should say: {log:?}"
    );
    let out = site.output(&["queue", "ls", "--json"]);
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("queue ls");
    assert!(
        doc["dispatcher_pid"].is_u64(),
        "served on the passed socket: {doc}"
    );
}

/// A connection that sends part of a request and stops is closed at the whole-message
/// deadline; the dispatcher answers others meanwhile.
#[test]
fn half_a_request_is_cut_off_at_its_deadline() {
    let site = Site::new(None);
    let _dispatcher = start(&site, &[]);
    let socket = site.slots().join("dispatcher.sock");
    let mut half = UnixStream::connect(&socket).expect("connect");
    half.write_all(br#"{"op":"li"#).expect("half a request");
    half.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let (_, out) = timed_ls(&site);
    assert!(out.status.success(), "served beside it");
    let mut rest = Vec::new();
    let began = Instant::now();
    let _ = half.read_to_end(&mut rest);
    assert!(
        began.elapsed() < Duration::from_secs(9),
        "closed at the deadline, not left open"
    );
}
