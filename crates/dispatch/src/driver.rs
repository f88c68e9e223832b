//! What a driver starts with: the account it runs as and an environment built fresh for it,
//! never the dispatcher's own (PROTOCOL.md, "The driver's start").
//!
//! The environment is the row's filtered variables, then `HOME`, `USER`, `LOGNAME`, `SHELL`
//! and `PATH` for the enqueuer's account, then the slot-directory variables the dispatcher
//! itself resolved with (so that the driver finds the same directory), then the attempt's own
//! `WORKLANE_ATTEMPT`, `WORKLANE_TOKEN`, `WORKLANE_SOCKET` and `WORKLANE_LANE`; each later one
//! wins over a row variable of the same name.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::Path;

/// The `PATH` a driver of root gets.
pub const ROOT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
/// The `PATH` a driver of any other user gets.
pub const USER_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// The variables of the dispatcher's own environment that a driver gets as they are: where
/// the slot directory and its config are, and the test-isolation root of a test run.
pub const PASSED_ON: [&str; 3] = [
    "AGENT_SLOTS_DIR",
    "AGENT_SLOTS_CONFIG",
    "WORKLANE_TEST_ROOT",
];

/// A user account, as a driver's environment names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Account {
    /// The login name (`USER`, `LOGNAME`); the uid in digits when the account is not listed.
    pub name: String,
    /// The home directory (`HOME`); `/` when not listed.
    pub home: String,
    /// The login shell (`SHELL`); `/bin/sh` when not listed or empty.
    pub shell: String,
}

impl Account {
    /// The account of `uid` as `/etc/passwd` lists it (accounts only a network directory
    /// knows are not listed there: see [`Account::unlisted`]).
    #[must_use]
    pub fn of(uid: u32) -> Account {
        std::fs::read_to_string("/etc/passwd")
            .ok()
            .and_then(|text| parse_passwd(&text, uid))
            .unwrap_or_else(|| Account::unlisted(uid))
    }

    /// The account of an unlisted `uid`: named by its number, at home in `/`, with `/bin/sh`.
    #[must_use]
    pub fn unlisted(uid: u32) -> Account {
        Account {
            name: uid.to_string(),
            home: "/".to_owned(),
            shell: "/bin/sh".to_owned(),
        }
    }
}

/// The account of `uid` in a `passwd(5)` text (`name:password:uid:gid:gecos:home:shell`), the
/// first line that names it; `None` if none does. Malformed lines are skipped.
#[must_use]
pub fn parse_passwd(text: &str, uid: u32) -> Option<Account> {
    text.lines().find_map(|line| {
        let fields: Vec<&str> = line.split(':').collect();
        let [name, _, id, _, _, home, shell] = fields.as_slice() else {
            return None;
        };
        if name.is_empty() || id.parse::<u32>().ok()? != uid {
            return None;
        }
        Some(Account {
            name: (*name).to_owned(),
            home: if home.is_empty() { "/" } else { home }.to_owned(),
            shell: if shell.is_empty() { "/bin/sh" } else { shell }.to_owned(),
        })
    })
}

/// What a driver's environment is built from.
#[derive(Debug, Clone, Copy)]
pub struct Start<'a> {
    /// The row's filtered variables.
    pub row: &'a BTreeMap<String, String>,
    /// The account it runs as.
    pub account: &'a Account,
    /// Its uid (root gets [`ROOT_PATH`]).
    pub uid: u32,
    /// The attempt id.
    pub attempt: &'a str,
    /// The admitted-start token.
    pub token: &'a str,
    /// The dispatcher's socket.
    pub socket: &'a Path,
    /// The lane's name.
    pub lane: &'a str,
}

/// The whole environment of a driver (see the module's documentation for the order), given
/// the dispatcher's own variables `inherited` (of which only [`PASSED_ON`] are kept).
#[must_use]
pub fn environment(
    start: &Start<'_>,
    inherited: impl IntoIterator<Item = (OsString, OsString)>,
) -> BTreeMap<OsString, OsString> {
    let mut env: BTreeMap<OsString, OsString> = start
        .row
        .iter()
        .filter(|(name, _)| !PASSED_ON.contains(&name.as_str()))
        .map(|(name, value)| (name.into(), value.into()))
        .collect();
    let path = if start.uid == 0 { ROOT_PATH } else { USER_PATH };
    for (name, value) in [
        ("HOME", start.account.home.as_str()),
        ("USER", start.account.name.as_str()),
        ("LOGNAME", start.account.name.as_str()),
        ("SHELL", start.account.shell.as_str()),
        ("PATH", path),
    ] {
        env.insert(name.into(), value.into());
    }
    for (name, value) in inherited {
        if name.to_str().is_some_and(|n| PASSED_ON.contains(&n)) {
            env.insert(name, value);
        }
    }
    for (name, value) in [
        ("WORKLANE_ATTEMPT", OsString::from(start.attempt)),
        ("WORKLANE_TOKEN", start.token.into()),
        ("WORKLANE_SOCKET", start.socket.as_os_str().to_owned()),
        ("WORKLANE_LANE", start.lane.into()),
    ] {
        env.insert(name.into(), value);
    }
    env
}

#[cfg(test)]
mod tests {
    use super::*;

    const PASSWD: &str = "root:x:0:0:root:/root:/bin/bash\n\
        daemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin\n\
        broken line\n\
        :x:7:7::/nowhere:/bin/false\n\
        nobody:x:65534:65534:nobody:/nonexistent:\n\
        ann:x:1001:1001:Ann,,,:/home/ann:/bin/zsh\n\
        dup:x:1001:1001::/home/dup:/bin/sh\n";

    #[test]
    fn accounts_are_read_from_passwd_lines() {
        assert_eq!(
            parse_passwd(PASSWD, 1001),
            Some(Account {
                name: "ann".into(),
                home: "/home/ann".into(),
                shell: "/bin/zsh".into()
            }),
            "the first line of the uid"
        );
        assert_eq!(
            parse_passwd(PASSWD, 65534).map(|a| a.shell),
            Some("/bin/sh".into()),
            "an empty shell is sh"
        );
        assert_eq!(parse_passwd(PASSWD, 7), None, "a nameless line is skipped");
        assert_eq!(parse_passwd(PASSWD, 42), None, "not listed");
        assert_eq!(parse_passwd("a:x:notanumber:1::/h:/s\n", 0), None);
        assert_eq!(Account::unlisted(42).name, "42");
        assert_eq!(Account::of(0).name, "root", "this machine's root");
    }

    #[test]
    fn a_driver_s_environment_is_built_fresh_and_the_attempt_s_own_variables_win() {
        let row = BTreeMap::from([
            ("LANE_X".to_owned(), "1".to_owned()),
            ("WORKLANE_TOKEN".to_owned(), "forged".to_owned()),
            ("WORKLANE_TEST_ROOT".to_owned(), "/forged".to_owned()),
        ]);
        let account = Account {
            name: "ann".into(),
            home: "/home/ann".into(),
            shell: "/bin/zsh".into(),
        };
        let start = Start {
            row: &row,
            account: &account,
            uid: 1001,
            attempt: "a-1",
            token: "t",
            socket: Path::new("/s/dispatcher.sock"),
            lane: "docs",
        };
        let inherited = [
            ("AGENT_SLOTS_DIR", "/s"),
            ("SECRET_TOKEN", "dispatcher's"),
            ("PATH", "/root/bin"),
            ("HOME", "/root"),
        ]
        .map(|(k, v)| (OsString::from(k), OsString::from(v)));
        let env = environment(&start, inherited);
        let get = |name: &str| env.get(&OsString::from(name)).and_then(|v| v.to_str());
        assert_eq!(get("LANE_X"), Some("1"), "the row's variables");
        assert_eq!(get("WORKLANE_TOKEN"), Some("t"), "the attempt's own win");
        assert_eq!(get("WORKLANE_ATTEMPT"), Some("a-1"));
        assert_eq!(get("WORKLANE_LANE"), Some("docs"));
        assert_eq!(get("WORKLANE_SOCKET"), Some("/s/dispatcher.sock"));
        assert_eq!(
            get("HOME"),
            Some("/home/ann"),
            "the account's, not the dispatcher's"
        );
        assert_eq!(get("USER"), Some("ann"));
        assert_eq!(get("LOGNAME"), Some("ann"));
        assert_eq!(get("SHELL"), Some("/bin/zsh"));
        assert_eq!(get("PATH"), Some(USER_PATH), "a user's PATH");
        assert_eq!(get("AGENT_SLOTS_DIR"), Some("/s"), "where the directory is");
        assert_eq!(
            get("SECRET_TOKEN"),
            None,
            "nothing else of the dispatcher's"
        );
        assert_eq!(
            get("WORKLANE_TEST_ROOT"),
            None,
            "no row sets what is passed on"
        );
        let root = environment(&Start { uid: 0, ..start }, []);
        assert_eq!(
            root.get(&OsString::from("PATH")).and_then(|v| v.to_str()),
            Some(ROOT_PATH)
        );
    }
}
