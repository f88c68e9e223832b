//! Each command's own exit codes, as its man page's EXIT STATUS section lists them.

/// The codes every command may exit with, beside its own.
pub(super) const COMMON: &[(&str, &str)] = &[
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
        ["protocol", "show"] => vec![
            ("0", "shown (also when this worklane may not take here)"),
            DIR,
        ],
        ["protocol", "drop"] => vec![
            ("0", "removed, or it was not named"),
            ("75", "something still uses it: named, and it stays"),
            (
                "78",
                "the slot directory cannot be used, protocol.json cannot be read, or the \
                 extension is one this worklane does not know (it cannot check what uses it)",
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
        ["queue"] | ["lease"] | ["config"] | ["budget"] | ["fleet"] | ["protocol"] => {
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
        ["proxy"] => vec![
            ("0", "stopped by SIGTERM or SIGINT, after its drain"),
            (
                "64",
                "also: a bad --upstream or --listen, or a provider without an API",
            ),
            (
                "69",
                "the address is in use, or this worklane was built without the proxy",
            ),
            (
                "78",
                "a provider the config does not describe, or a slot directory it cannot use",
            ),
        ],
        ["budget", "release"] => vec![
            (
                "0",
                "released, or skipped (its lock busy, its state unreadable: stderr says why)",
            ),
            (
                "64",
                "also: no key in the variable, or an unknown --provider",
            ),
            (
                "78",
                "a --provider the config does not describe, or describes wrongly",
            ),
        ],
        ["fleet", "set-cap"] | ["fleet", "status"] => vec![
            ("0", "done"),
            ("64", "also: no --fleet endpoints"),
            (
                "69",
                "etcd does not answer, or this worklane was built without the fleet",
            ),
        ],
        ["events"] => vec![
            (
                "0",
                "printed (with --follow: until interrupted, or its reader goes away)",
            ),
            (
                "64",
                "also: a --since that is neither a time nor a duration, an unknown --kind",
            ),
            (
                "71",
                "also: the journal cannot be read (no permission, a directory or link at its \
                 name)",
            ),
            DIR,
        ],
        ["metrics"] => vec![
            (
                "0",
                "printed, or written (with --listen: served until interrupted)",
            ),
            (
                "71",
                "also: the journal cannot be read, the --textfile cannot be written, or the \
                 --listen address cannot be listened on",
            ),
            DIR,
        ],
        ["top"] => vec![
            ("0", "quit with q"),
            ("69", "this worklane was built without the `top` feature"),
            (
                "71",
                "also: the terminal cannot be used, or the journal cannot be read",
            ),
            DIR,
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
