//! `worklane events`: the event journal, as lines for a person or as its JSON lines, from the
//! start or `--since` a time, of some kinds, and `--follow`ed as it grows.

use crate::cli::EventsArgs;
use crate::exit::{self, Failure};
use crate::out::{errln, outln};
use std::process::ExitCode;
use worklane_journal::{Batch, Entry, Follow, KINDS};

/// Which events are shown.
struct Filter {
    since_ms: Option<i64>,
    kinds: Vec<String>,
    /// Events skipped under `--since` because their `at` is not a time (counted, said once
    /// per batch).
    timeless: std::cell::Cell<u64>,
}

impl Filter {
    fn accepts(&self, entry: &Entry) -> bool {
        if let Some(since) = self.since_ms {
            match worklane_journal::ms_of_time(&entry.at) {
                Some(at) if at < since => return false,
                Some(_) => {}
                None => {
                    // Nothing says it is recent: not shown as if it were.
                    self.timeless.set(self.timeless.get() + 1);
                    return false;
                }
            }
        }
        let kind = entry.event.kind();
        // A rotation's carried totals are bookkeeping, not an event: shown when asked for.
        if kind == "totals" && !self.kinds.iter().any(|k| k == "totals") {
            return false;
        }
        self.kinds.is_empty()
            || self.kinds.iter().any(|k| {
                kind == k
                    || kind
                        .strip_prefix(k.as_str())
                        .is_some_and(|rest| rest.starts_with('-'))
            })
    }
}

/// `--since`: a duration back from `now_ms`, or an RFC 3339 time.
fn since_ms(text: &str, now_ms: i64) -> Result<i64, String> {
    if let Some(at) = worklane_journal::ms_of_time(text) {
        return Ok(at);
    }
    let back = crate::cli::parse_duration(text).map_err(|why| {
        format!("--since {text:?}: neither an RFC 3339 time nor a duration ({why})")
    })?;
    Ok(now_ms.saturating_sub(i64::try_from(back.as_millis()).unwrap_or(i64::MAX)))
}

/// `--kind`: a kind the journal writes, or a family of them (the part before the first `-`).
fn check_kind(kind: &str) -> Result<(), String> {
    let known = KINDS
        .iter()
        .any(|k| *k == kind || k.strip_prefix(kind).is_some_and(|r| r.starts_with('-')));
    match known {
        true => Ok(()),
        false => Err(format!(
            "--kind {kind:?}: no such kind; the kinds are {} (or a family: slot, role, dispatch, \
             budget, holder)",
            KINDS.join(", ")
        )),
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// Prints the entries `filter` accepts, and says on stderr how many torn lines were skipped.
fn print(batch: &Batch, filter: &Filter, as_json: bool) -> Result<(), Failure> {
    for entry in batch.entries.iter().filter(|e| filter.accepts(e)) {
        if as_json {
            outln!("{}", crate::json::line(entry))?;
        } else {
            outln!("{}", entry.describe())?;
        }
    }
    if batch.skipped > 0 {
        errln!(
            "worklane: {} torn or unreadable journal line(s) skipped (a writer killed \
             mid-line leaves one)",
            batch.skipped
        );
    }
    if batch.mistyped > 0 {
        errln!(
            "worklane: {} journal line(s) skipped: a field has the wrong type for its kind \
             (another writer's; PROTOCOL.md 17.1 lists each kind's fields)",
            batch.mistyped
        );
    }
    let timeless = filter.timeless.replace(0);
    if timeless > 0 {
        errln!(
            "worklane: {timeless} event(s) skipped under --since: their `at` is not an RFC \
             3339 time"
        );
    }
    Ok(())
}

/// How often `--follow` looks whether its reader has gone while no event comes.
const READER_LOOK: std::time::Duration = std::time::Duration::from_millis(200);

fn read_failed(e: &worklane_journal::error::Error) -> Failure {
    use worklane_journal::error::Error as E;
    let code = match e {
        E::Name { .. } => exit::SOFTWARE,
        E::Open { .. } | E::Read { .. } | E::Watch { .. } => exit::OS_ERROR,
        _ => exit::OS_ERROR,
    };
    Failure::new(code, exit::chain(e))
}

pub(crate) fn events(args: &EventsArgs) -> Result<ExitCode, Failure> {
    let since_ms = args
        .since
        .as_deref()
        .map(|s| since_ms(s, now_ms()))
        .transpose()
        .map_err(|why| Failure::new(exit::USAGE, why))?;
    for kind in &args.kinds {
        check_kind(kind).map_err(|why| Failure::new(exit::USAGE, why))?;
    }
    let filter = Filter {
        since_ms,
        kinds: args.kinds.clone(),
        timeless: std::cell::Cell::new(0),
    };
    let pool = crate::pool()?;
    // The journal reads the same, but this worklane takes nothing here: said once.
    if let Err(why) = worklane_admission::protocol::check_dir(pool.dir()) {
        errln!("worklane: note: {why}");
    }
    if !args.follow {
        let batch = worklane_journal::read(pool.dir()).map_err(|e| read_failed(&e))?;
        print(&batch, &filter, args.json)?;
        return Ok(ExitCode::SUCCESS);
    }
    let (mut follow, history) = Follow::start(pool.dir()).map_err(|e| read_failed(&e))?;
    print(&history, &filter, args.json)?;
    // Until the reader goes: seen at a write, or between events within READER_LOOK.
    while !crate::out::closed() && !crate::out::reader_gone() {
        let batch = follow
            .next(Some(READER_LOOK))
            .map_err(|e| read_failed(&e))?;
        print(&batch, &filter, args.json)?;
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn since_takes_a_time_or_a_duration_back() {
        let now = 1_796_014_519_924;
        assert_eq!(since_ms("10m", now), Ok(now - 600_000));
        assert_eq!(since_ms("2026-11-30T04:55:19.924Z", now), Ok(now));
        assert!(since_ms("yesterday", now).is_err());
    }

    #[test]
    fn kinds_and_families_are_known_and_nothing_else() {
        for ok in [
            "slot-taken",
            "slot",
            "takeover",
            "dispatch",
            "budget-paused",
            "undrain",
        ] {
            assert_eq!(check_kind(ok), Ok(()), "{ok}");
        }
        for bad in ["slots", "slot-", "taken", "", "dispatch-x"] {
            assert!(check_kind(bad).is_err(), "{bad}");
        }
    }
}
