//! A test that runs its own binary again, running only itself, as the subject of what it
//! checks (a process whose standard input is closed, whose environment names a broken slot
//! directory): what a test cannot do to the harness's own process.

use crate::Gated;
use std::process::Command;

/// Runs this test binary again with `--exact test --test-threads=1`, `configure` setting what
/// the subject is given (its environment: the variable that tells the test it is the
/// subject), and asserts that the subject passed, with its output when it did not.
pub fn run_again_as_subject(test: &str, configure: impl FnOnce(&mut Command)) {
    let mut command = Command::new(std::env::current_exe().expect("this test binary"));
    command.args(["--exact", test, "--test-threads=1"]);
    configure(&mut command);
    let out = command.output_gated().expect("start the subject");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the subject must pass\n{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("test result: ok. 1 passed"), "{stdout}");
}
