//! Process calls that need no `unsafe`: an idle probe run by the shell, and a signal to a
//! process by its pid.

/// Runs `script` with `sh -c`, its stdin empty, and tells whether it exited 0 (an idle
/// probe: any failure to run it is "no").
pub fn shell_says_yes(script: &str) -> bool {
    #[allow(
        clippy::disallowed_methods,
        reason = "product code: the probe runs before the slot is taken, no guard held"
    )]
    let status = std::process::Command::new("sh")
        .args(["-c", script])
        .stdin(std::process::Stdio::null())
        .status();
    status.is_ok_and(|s| s.success())
}

/// Sends `signal` to process `pid` (`queue cancel`'s SIGTERM to a runner it found in the line).
/// Errors are the kernel's (ESRCH: gone; EPERM: not ours).
pub fn signal_pid(pid: u32, signal: rustix::process::Signal) -> std::io::Result<()> {
    let pid = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
        .ok_or_else(|| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
    rustix::process::kill_process(pid, signal).map_err(Into::into)
}

/// A signal's name as the journal says it (`SIGTERM`), or `signal N` for one without a name
/// here.
#[must_use]
pub fn signal_name(signal: i32) -> String {
    use rustix::process::Signal;
    [
        (Signal::HUP, "SIGHUP"),
        (Signal::INT, "SIGINT"),
        (Signal::QUIT, "SIGQUIT"),
        (Signal::ABORT, "SIGABRT"),
        (Signal::KILL, "SIGKILL"),
        (Signal::USR1, "SIGUSR1"),
        (Signal::USR2, "SIGUSR2"),
        (Signal::PIPE, "SIGPIPE"),
        (Signal::ALARM, "SIGALRM"),
        (Signal::TERM, "SIGTERM"),
    ]
    .iter()
    .find(|(s, _)| s.as_raw() == signal)
    .map_or_else(
        || format!("signal {signal}"),
        |(_, name)| (*name).to_owned(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use worklane_testkit::Gated;

    #[test]
    fn the_idle_probe_is_yes_only_when_its_script_exits_0() {
        assert!(shell_says_yes("true"));
        assert!(shell_says_yes("test -d /"));
        assert!(!shell_says_yes("false"));
        assert!(!shell_says_yes("exit 3"));
        assert!(
            !shell_says_yes("read line; test -n \"$line\""),
            "its stdin is empty"
        );
    }

    #[test]
    fn a_signal_reaches_the_pid_named_and_no_pid_is_an_error() {
        let mut child = std::process::Command::new("sleep")
            .arg("60")
            .stdin(std::process::Stdio::null())
            .spawn_gated()
            .expect("start sleep");
        signal_pid(child.id(), rustix::process::Signal::KILL).expect("signal it");
        let status = child.wait().expect("reap");
        assert_eq!(
            std::os::unix::process::ExitStatusExt::signal(&status),
            Some(9)
        );
        assert_eq!(
            signal_pid(0, rustix::process::Signal::TERM)
                .expect_err("pid 0 is no process")
                .kind(),
            std::io::ErrorKind::InvalidInput
        );
    }

    #[test]
    fn signals_are_named_as_the_journal_says_them() {
        assert_eq!(signal_name(15), "SIGTERM");
        assert_eq!(signal_name(9), "SIGKILL");
        assert_eq!(signal_name(2), "SIGINT");
        assert_eq!(signal_name(34), "signal 34");
    }
}
