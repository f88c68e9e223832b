//! `worklane man`: the man pages, generated from clap (`clap_mangen`), one per command, each
//! with `worklane VERSION` in its footer and an EXIT STATUS section listing that command's own
//! exit codes ([`exit_codes`]; the top page's are `cli::EXIT_CODES`).

use crate::exit::{self, Failure};
use crate::out::sayln;
use std::process::ExitCode;

mod codes;

use codes::COMMON;
pub(crate) use codes::exit_codes;

/// worklane's version, as every page's footer and VERSION section show it.
const VERSION: &str = env!("CARGO_PKG_VERSION");

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
