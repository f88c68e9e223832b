use super::*;

struct Tmux {
    name: String,
}

impl Tmux {
    fn capture(&self) -> String {
        let out = Command::new("tmux")
            .args(["capture-pane", "-p", "-t", &self.name])
            .output_gated()
            .expect("tmux capture-pane");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn shows(&self, what: &str, text: &str) -> String {
        let mut screen = String::new();
        wait_until(what, || {
            screen = self.capture();
            screen.contains(text)
        });
        screen
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .args(["kill-session", "-t", &self.name])
            .output_gated();
    }
}

#[test]
fn top_shows_a_new_holder_and_stop_and_q_gives_the_terminal_back() {
    let site = Site::new(None);
    let name = format!("worklane-top-{}", std::process::id());
    let script = format!(
        "echo before-top; {} top; echo \"exit=$?\" > {}; exec sleep 60",
        worklane_bin(),
        site.file("exit").display()
    );
    let started = Command::new("tmux")
        .args(["new-session", "-d", "-s", &name, "-x", "80", "-y", "24"])
        .arg("-e")
        .arg(format!("AGENT_SLOTS_DIR={}", site.slots().display()))
        .arg("-e")
        .arg(format!("WORKLANE_TEST_ROOT={}", site.temp.path().display()))
        .args(["sh", "-c", &script])
        .output_gated()
        .expect("tmux new-session");
    assert!(started.status.success(), "{started:?}");
    let tmux = Tmux { name };
    tmux.shows("top's first screen", "worklane top");
    let mut holder = site.spawn(&["run", "--owner", "holder"], HOLD, "0");
    wait_until("the holder", || site.file("up.0").exists());
    let screen = tmux.shows("the new holder on screen", "agent-0.lock");
    assert!(screen.contains("holder"), "its owner: {screen}");
    let contained =
        serde_json::from_slice::<serde_json::Value>(&site.output(&["slots", "--json"]).stdout)
            .expect("json")["containment"]["on"]
            == true;
    if contained {
        // The run's CPU time and processes, from its cgroup.
        tmux.shows("the run's CPU column", "s 2p");
    }
    assert!(
        screen.contains("build jobs 0 of"),
        "the build jobs in the header: {screen}"
    );
    assert!(screen.contains("slot-taken"), "and its event: {screen}");
    assert!(
        screen.lines().count() <= 24 && screen.lines().all(|l| l.chars().count() <= 80),
        "within 80x24: {screen}"
    );
    assert_eq!(site.code(&["stop-all", "top", "test"]), 0);
    tmux.shows("the STOP banner", "STOP by");
    assert!(wait_exit(&mut holder, "the halted holder").code().is_some());
    let sent = Command::new("tmux")
        .args(["send-keys", "-t", &tmux.name, "q"])
        .output_gated()
        .expect("send-keys");
    assert!(sent.status.success());
    wait_until("top to exit", || site.file("exit").exists());
    assert_eq!(
        std::fs::read_to_string(site.file("exit"))
            .expect("exit")
            .trim(),
        "exit=0",
        "q exits 0"
    );
    let screen = tmux.shows("the terminal as it was", "before-top");
    assert!(
        !screen.contains("worklane top"),
        "the alternate screen is gone: {screen}"
    );
}

/// Five waiters in line are all shown when the screen has room, and "+N more" says how
/// many did not fit when it has not.
#[test]
fn top_shows_every_waiter_that_fits_and_how_many_more() {
    let site = Site::new(Some(r#"{"max_agents": 1}"#));
    let name = format!("worklane-top-line-{}", std::process::id());
    let started = Command::new("tmux")
        .args(["new-session", "-d", "-s", &name, "-x", "100", "-y", "40"])
        .arg("-e")
        .arg(format!("AGENT_SLOTS_DIR={}", site.slots().display()))
        .arg("-e")
        .arg(format!("WORKLANE_TEST_ROOT={}", site.temp.path().display()))
        .args([
            "sh",
            "-c",
            &format!("{} top; exec sleep 60", worklane_bin()),
        ])
        .output_gated()
        .expect("tmux new-session");
    assert!(started.status.success(), "{started:?}");
    let tmux = Tmux { name };
    tmux.shows("top's first screen", "worklane top");
    let mut holder = site.spawn(&["run", "--owner", "holder"], HOLD, "0");
    wait_until("the holder", || site.file("up.0").exists());
    let mut waiters: Vec<Running> = (1..=5)
        .map(|i| {
            site.spawn(
                &["run", "--owner", &format!("waiter{i}")],
                HOLD,
                &i.to_string(),
            )
        })
        .collect();
    // The line panel alone (the events below name the waiters too).
    let panel = |screen: &str| -> String {
        screen
            .lines()
            .skip_while(|l| !l.contains("┌line"))
            .skip(1)
            .take_while(|l| !l.contains('└'))
            .collect::<Vec<_>>()
            .join("\n")
    };
    let mut line = String::new();
    wait_until("every waiter in the line panel", || {
        line = panel(&tmux.capture());
        (1..=5).all(|i| line.contains(&format!("waiter{i}")))
    });
    assert!(!line.contains("more"), "all of them fit: {line}");
    // A screen too short for all of them: the first that fit, then how many more.
    let resized = Command::new("tmux")
        .args(["resize-window", "-t", &tmux.name, "-x", "100", "-y", "18"])
        .output_gated()
        .expect("tmux resize-window");
    assert!(resized.status.success(), "{resized:?}");
    wait_until("the rest counted", || {
        line = panel(&tmux.capture());
        line.contains("more")
    });
    assert!(
        line.contains("1. agent waiter"),
        "the head still shown: {line}"
    );
    let shown = line.matches("waiter").count();
    assert!(
        shown < 5 && line.contains(&format!("+{} more", 5 - shown)),
        "the others counted: {line}"
    );
    for (i, waiter) in waiters.iter_mut().enumerate() {
        super::jobs::sigkill(waiter.id());
        let _ = wait_exit(waiter, &format!("waiter{}", i + 1));
    }
    std::fs::write(site.file("release.0"), b"").expect("release");
    assert!(wait_exit(&mut holder, "the holder").success());
}
