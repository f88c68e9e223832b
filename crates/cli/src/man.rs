//! `worklane man`: the man pages, generated from clap (`clap_mangen`), one per command, each
//! with `worklane VERSION` in its footer and an EXIT STATUS section listing that command's own
//! exit codes ([`exit_codes`]; the top page's are `cli::EXIT_CODES`).

use crate::exit::{self, Failure};
use crate::out::sayln;
use std::process::ExitCode;

/// worklane's version, as every page's footer and VERSION section show it.
const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The codes every command may exit with, beside its own.
const COMMON: &[(&str, &str)] = &[
    (
        "64",
        "usage error (clap's, or an argument worklane checks itself)",
    ),
    ("70", "internal error"),
    ("71", "system error"),
    (
        "74",
        "output could not be written (stdout; a closed pipe is no error)",
    ),
];

/// The slot directory could not be used (owned or writable by others, a symbolic link, an
/// unlockable filesystem).
const DIR: (&str, &str) = (
    "78",
    "the slot directory cannot be used (its owner, mode or filesystem; the message says the fix)",
);
/// A take with a config that cannot be used, or a slot directory that cannot be.
const TAKE_CONFIG: (&str, &str) = (
    "78",
    "the config or the slot directory cannot be used (the message names the file and the fix)",
);
const STATUS: (&str, &str) = (
    "N",
    "the command's own status; if signal N ended it, worklane ends by it too (a shell shows \
     128+N), except after a halt worklane made, which exits 128+N",
);
const CANNOT_RUN: [(&str, &str); 2] = [
    ("126", "the command cannot be executed"),
    ("127", "the command was not found"),
];

/// The exit codes of the command at `path` (`["lease", "run"]`), besides [`COMMON`]; `None`
/// for a path this table does not know (a unit test makes sure every command is known).
pub(crate) fn exit_codes(path: &[&str]) -> Option<Vec<(&'static str, &'static str)>> {
    let own: Vec<(&str, &str)> = match path {
        ["run"] => [
            STATUS,
            (
                "64",
                "also: a run nested in the command of a run of the same kind and slot directory",
            ),
            ("69", "refused: STOP or a drain is in force"),
            (
                "75",
                "busy: at the cap with --no-wait, or --timeout passed (-E N exits N instead), or \
                 the full run is held",
            ),
            TAKE_CONFIG,
        ]
        .into_iter()
        .chain(CANNOT_RUN)
        .collect(),
        ["lease", "run"] => [
            STATUS,
            (
                "69",
                "refused: STOP is in force; or the role lease was lost while the command ran \
                 (it was halted)",
            ),
            (
                "75",
                "the role is held by someone else (or --timeout passed)",
            ),
            TAKE_CONFIG,
        ]
        .into_iter()
        .chain(CANNOT_RUN)
        .collect(),
        ["claim"] => [
            STATUS,
            ("69", "refused: STOP is in force"),
            (
                "75",
                "the dispatcher refused the claim (no admitted attempt with that token)",
            ),
            DIR,
        ]
        .into_iter()
        .chain(CANNOT_RUN)
        .collect(),
        ["reconcile"] => vec![
            (
                "0",
                "said who holds the attempt: the dispatcher, a driver, or nobody (with how it \
                 ended, when the history has it)",
            ),
            (
                "64",
                "also: an attempt nobody knows (no row, no history, no lane names it)",
            ),
            DIR,
        ],
        ["queue", "retry"] => vec![
            ("0", "queued again"),
            ("69", "no dispatcher answers, or it refuses this user"),
            (
                "75",
                "no such attempt, or it is not failed (queued, starting or running)",
            ),
            DIR,
        ],
        ["queue", "prune"] => vec![
            (
                "0",
                "forgot the ended attempts asked for and removed their logs",
            ),
            ("64", "also: --older-than is not a duration"),
            ("69", "no dispatcher answers"),
            DIR,
        ],
        ["slots"] | ["queue", "ls"] | ["budget", "show"] => vec![
            (
                "0",
                "shown, whatever it shows (a broken config or file is one of its lines)",
            ),
            DIR,
        ],
        ["stop-all"] => vec![
            (
                "0",
                "STOP is in force: written, or one already there that could not be replaced \
                 (a directory with files in it)",
            ),
            DIR,
        ],
        ["resume-all"] => vec![
            ("0", "no STOP is in force: removed, or there was none"),
            (
                "71",
                "STOP could not be removed (a directory with files in it): it stays in force",
            ),
            DIR,
        ],
        ["drain"] => vec![
            ("0", "the drain flag is written and in force"),
            (
                "64",
                "also: --until is not a time or duration, is past, or is more than 4 h ahead",
            ),
            (
                "71",
                "the flag could not be written (a directory with files in it at its name): no \
                 drain is in force",
            ),
            DIR,
        ],
        ["undrain"] => vec![
            (
                "0",
                "no drain is in force: removed, none, or what is there is no flag",
            ),
            DIR,
        ],
        ["set-test-slots"] | ["config", "set"] | ["config", "unset"] => vec![
            ("0", "written"),
            ("64", "also: a value out of range or of the wrong kind"),
            (
                "78",
                "the config file is broken (or would be), or cannot be written there: nothing \
                 is written",
            ),
        ],
        ["config", "get"] => vec![
            ("0", "printed"),
            (
                "78",
                "the config cannot be used (the message names the file and the fix)",
            ),
        ],
        ["idle"] => vec![
            ("0", "no full run is live"),
            ("75", "a full run is live"),
            DIR,
        ],
        ["why"] => vec![
            ("0", "nothing blocks"),
            (
                "64",
                "also: a --lock that cannot be a file of the slot directory",
            ),
            ("69", "STOP or a drain blocks"),
            (
                "75",
                "another question blocks (the cap, the budget, a holder)",
            ),
            (
                "78",
                "the config cannot be used, so every take would be refused; or the slot \
                 directory cannot be",
            ),
        ],
        ["dispatcher"] => vec![
            ("0", "stopped by SIGTERM or SIGINT: the rows stay"),
            ("75", "another dispatcher serves this slot directory"),
            TAKE_CONFIG,
        ],
        ["enqueue"] => vec![
            ("0", "queued: the attempt id is printed"),
            ("64", "also: a bad or reserved lane name"),
            (
                "69",
                "no dispatcher answers, it is in waiter mode, or it refuses this user",
            ),
            ("75", "the lane is taken or already queued"),
            TAKE_CONFIG,
        ],
        ["queue"] | ["lease"] | ["config"] | ["budget"] | ["fleet"] => {
            vec![("0", "see each subcommand's page for its exit codes")]
        }
        ["queue", "cancel"] => vec![
            ("0", "cancelled"),
            ("64", "also: an id that is neither a-... nor fr-<pid>"),
            ("69", "no dispatcher answers, or it refuses this user"),
            (
                "75",
                "nothing of that id is queued, or the full run has already started",
            ),
            DIR,
        ],
        ["queue", "full-run"] => vec![
            (
                "0",
                "the runner is started (its id, pid and log are printed)",
            ),
            TAKE_CONFIG,
        ],
        ["budget", "take"] => vec![
            (
                "0",
                "the call may go (counted, not known, or unaccounted: stderr says why)",
            ),
            ("64", "also: no token in the variable, or a bad --resource"),
            ("69", "--fleet: etcd does not answer"),
            (
                "75",
                "rate_limited or secondary_rate_limited: do not make the call",
            ),
        ],
        ["budget", "observe"] => vec![
            (
                "0",
                "recorded, or skipped (its lock busy, its state unreadable: stderr says why)",
            ),
            (
                "64",
                "also: no token, a --header that is not `Name: value`, a dump without a status \
                 line",
            ),
            ("69", "--fleet: etcd does not answer"),
        ],
        ["fleet", "set-cap"] | ["fleet", "status"] => vec![
            ("0", "done"),
            ("64", "also: no --fleet endpoints"),
            (
                "69",
                "etcd does not answer, or this worklane was built without the fleet",
            ),
        ],
        ["completions"] => vec![("0", "printed")],
        ["man"] => vec![
            ("0", "printed, or written"),
            ("64", "also: no such command"),
        ],
        _ => return None,
    };
    Some(own)
}

/// `text` as roff running text: backslashes and hyphens escaped, and a line that would start
/// with a control character kept as text.
fn roff_text(text: &str) -> String {
    let escaped = text.replace('\\', "\\e").replace('-', "\\-");
    if escaped.starts_with(['.', '\'']) {
        format!("\\&{escaped}")
    } else {
        escaped
    }
}

/// The EXIT STATUS section of the page of the command at `path`.
fn exit_status_section(path: &[&str]) -> String {
    let mut codes: Vec<(&str, String)> = exit_codes(path)
        .unwrap_or_default()
        .into_iter()
        .map(|(code, meaning)| (code, meaning.to_owned()))
        .collect();
    for (common, meaning) in COMMON {
        match codes.iter_mut().find(|(code, _)| code == common) {
            // A command's own case of a common code (`also: ...`) follows the common meaning.
            Some((_, own)) if own.starts_with("also: ") => *own = format!("{meaning}; {own}"),
            Some(_) => {}
            None => codes.push((common, (*meaning).to_owned())),
        }
    }
    codes.sort_by_key(|(code, _)| code.parse::<u32>().unwrap_or(0));
    let mut section = String::from(".SH \"EXIT STATUS\"\n");
    for (code, meaning) in codes {
        section.push_str(&format!(".TP\n\\fB{code}\\fR\n{}\n", roff_text(&meaning)));
    }
    section
}

/// Every man page: worklane's own, then one per command that is not hidden, nested ones
/// named by their path (`worklane-lease-run.1`), each as (file name, roff).
pub(crate) fn pages() -> Result<Vec<(String, Vec<u8>)>, Failure> {
    use clap::CommandFactory;
    fn walk(
        cmd: &clap::Command,
        path: &mut Vec<String>,
        pages: &mut Vec<(String, Vec<u8>)>,
    ) -> std::io::Result<()> {
        // Every page's footer says whose version it documents, as the top page's does.
        let page_cmd = cmd.clone().version(VERSION);
        // Rendered into memory (clap_mangen fails mid-write on a failed write).
        let man = clap_mangen::Man::new(page_cmd).source(format!("worklane {VERSION}"));
        let mut page = Vec::new();
        man.render(&mut page)?;
        if !path.is_empty() {
            let path: Vec<&str> = path.iter().map(String::as_str).collect();
            page.extend_from_slice(exit_status_section(&path).as_bytes());
        }
        pages.push((man.get_filename(), page));
        for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
            path.push(sub.get_name().to_owned());
            walk(sub, path, pages)?;
            path.pop();
        }
        Ok(())
    }
    // Built whole first, so that each command knows its path: its page is titled
    // `worklane-lease-run` and its synopsis says `worklane lease run`.
    let mut cmd = crate::cli::Cli::command().disable_help_subcommand(true);
    cmd.build();
    let mut pages = Vec::new();
    walk(&cmd, &mut Vec::new(), &mut pages)
        .map_err(|e| Failure::new(exit::SOFTWARE, format!("cannot render a man page: {e}")))?;
    Ok(pages)
}

/// `man [COMMAND...]` prints one page; `man --all DIR` writes every page into DIR.
pub(crate) fn man(command: &[String], all: Option<&std::path::Path>) -> Result<ExitCode, Failure> {
    let pages = pages()?;
    if let Some(dir) = all {
        std::fs::create_dir_all(dir).map_err(|e| {
            Failure::new(
                exit::IO_ERROR,
                format!("man --all: cannot create {}: {e}", dir.display()),
            )
        })?;
        for (name, page) in &pages {
            let path = dir.join(name);
            std::fs::write(&path, page).map_err(|e| {
                Failure::new(
                    exit::IO_ERROR,
                    format!("man --all: cannot write {}: {e}", path.display()),
                )
            })?;
            sayln!("{}", path.display())?;
        }
        return Ok(ExitCode::SUCCESS);
    }
    let name = std::iter::once("worklane")
        .chain(command.iter().map(String::as_str))
        .collect::<Vec<_>>()
        .join("-");
    let file = format!("{name}.1");
    let Some((_, page)) = pages.iter().find(|(n, _)| *n == file) else {
        return Err(Failure::new(
            exit::USAGE,
            format!(
                "man {}: no such command (`worklane --help` lists them)",
                command.join(" ")
            ),
        ));
    };
    crate::out::bytes(page)?;
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    /// Every command that is not hidden, as its path (`["lease", "run"]`).
    fn paths(cmd: &clap::Command, prefix: &[String], out: &mut Vec<Vec<String>>) {
        for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
            let mut path = prefix.to_vec();
            path.push(sub.get_name().to_owned());
            out.push(path.clone());
            paths(sub, &path, out);
        }
    }

    #[test]
    fn every_command_gets_a_man_page_named_by_its_path() {
        let pages = super::pages().expect("pages");
        let names: Vec<&str> = pages.iter().map(|(n, _)| n.as_str()).collect();
        let mut commands = Vec::new();
        paths(&crate::cli::Cli::command(), &[], &mut commands);
        assert!(
            commands.len() > 20 && commands.contains(&vec!["lease".into(), "run".into()]),
            "the walk sees nested commands: {commands:?}"
        );
        let mut want = vec!["worklane.1".to_owned()];
        want.extend(
            commands
                .iter()
                .map(|p| format!("worklane-{}.1", p.join("-"))),
        );
        for name in &want {
            assert!(names.contains(&name.as_str()), "a page {name}: {names:?}");
        }
        assert_eq!(names.len(), want.len(), "one page each, no more: {names:?}");
        for (name, page) in &pages {
            let text = String::from_utf8_lossy(page);
            let title = name.trim_end_matches(".1");
            assert!(
                text.contains(&format!("\n.TH {title} 1  \"worklane {}\"", super::VERSION)),
                "{name} is a roff page titled {title}, its footer worklane's version: {}",
                &text[..text.len().min(120)]
            );
        }
        assert!(
            !names
                .iter()
                .any(|n| n.contains("queued-full-run") || n.contains("help")),
            "no page for hidden commands or help: {names:?}"
        );
        let lease_run = &pages
            .iter()
            .find(|(n, _)| n == "worklane-lease-run.1")
            .expect("lease run")
            .1;
        assert!(
            String::from_utf8_lossy(lease_run).contains("worklane lease run"),
            "the synopsis names the whole command"
        );
    }

    #[test]
    fn every_command_page_lists_its_own_exit_codes() {
        let mut commands = Vec::new();
        paths(&crate::cli::Cli::command(), &[], &mut commands);
        let pages = super::pages().expect("pages");
        for path in &commands {
            let path: Vec<&str> = path.iter().map(String::as_str).collect();
            let own = super::exit_codes(&path)
                .unwrap_or_else(|| panic!("`{}` has its exit codes listed", path.join(" ")));
            let name = format!("worklane-{}.1", path.join("-"));
            let page = pages
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, p)| String::from_utf8_lossy(p).into_owned())
                .expect("its page");
            let section = page
                .split(".SH \"EXIT STATUS\"\n")
                .nth(1)
                .unwrap_or_else(|| panic!("{name} has an EXIT STATUS section: {page}"));
            for (code, _) in own.iter().chain(super::COMMON) {
                assert!(
                    section.contains(&format!(".TP\n\\fB{code}\\fR\n")),
                    "{name} lists {code}: {section}"
                );
            }
        }
    }

    #[test]
    fn roff_text_keeps_control_characters_as_text() {
        assert_eq!(super::roff_text("a-b"), "a\\-b");
        assert_eq!(super::roff_text(".x"), "\\&.x");
        assert_eq!(super::roff_text("'x"), "\\&'x");
        assert_eq!(super::roff_text("a\\b"), "a\\eb");
    }
}
