//! The exit codes xtask shares with the `worklane` CLI (`crates/cli/src/exit.rs`, sysexits
//! values), so that a script treats a refusal of either the same way.

/// The command line is wrong.
pub(crate) const USAGE: u8 = 64;
/// Refused by the machine's state an operator sets: no maintenance window is open.
pub(crate) const UNAVAILABLE: u8 = 69;
/// Busy: something is live; try again later.
pub(crate) const TEMP_FAIL: u8 = 75;
/// The directory, its config or a file in it is wrong.
pub(crate) const CONFIG: u8 = 78;

#[cfg(test)]
mod tests {
    use super::{CONFIG, TEMP_FAIL, UNAVAILABLE, USAGE};

    #[test]
    fn the_shared_codes_are_the_clis() {
        let cli = std::fs::read_to_string(crate::workspace_root().join("crates/cli/src/exit.rs"))
            .expect("the CLI's exit codes");
        for (name, code) in [
            ("USAGE", USAGE),
            ("UNAVAILABLE", UNAVAILABLE),
            ("TEMP_FAIL", TEMP_FAIL),
            ("CONFIG", CONFIG),
        ] {
            let line = format!("pub(crate) const {name}: u8 = {code};");
            assert!(cli.contains(&line), "crates/cli/src/exit.rs has `{line}`");
        }
    }
}
