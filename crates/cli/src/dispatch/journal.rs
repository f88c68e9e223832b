//! The dispatcher's log (its stderr): one line per event, a line that repeats said once a
//! minute with a count.

use super::*;

/// The dispatcher's log (its stderr): one line per event, with a line that repeats (the same
/// kind, of the same attempt or peer) said at most once a minute, and how many were left out
/// said with the next.
#[derive(Default)]
pub(super) struct Journal {
    seen: std::collections::HashMap<String, (std::time::Instant, u32)>,
}

/// How long a repeated line stays quiet.
const QUIET_FOR: std::time::Duration = std::time::Duration::from_secs(60);

impl Journal {
    pub(super) fn log(&mut self, event: &Event) {
        let now = rfc3339_ms(SystemClock.now_ms());
        let (key, line) = match event {
            Event::Started { attempt, pid } => {
                (None, format!("started the driver of {attempt} (pid {pid})"))
            }
            Event::StartFailed {
                attempt,
                error,
                failure,
            } => (
                // Parking is said every time (once per attempt, at the end of its tries).
                (!matches!(failure, StartFailure::Parked { .. }))
                    .then(|| format!("start-failed {attempt}")),
                format!(
                    "cannot start the driver of {attempt}: {error}; {}",
                    failure_words(failure)
                ),
            ),
            Event::DriverEnded {
                attempt,
                why,
                failure,
            } => (
                Some(format!("driver-ended {attempt}")),
                format!("attempt {attempt}: {why}; {}", failure_words(failure)),
            ),
            Event::Ended(ended) => (
                None,
                format!(
                    "attempt {} of lane {} {}",
                    ended.attempt,
                    ended.lane,
                    ended_words(ended)
                ),
            ),
            Event::Expired(ids) => (
                None,
                format!("not claimed in time, queued again: {}", ids.join(", ")),
            ),
            Event::Answered { op, refused } => match refused {
                Some(code) => (
                    Some(format!("refused {op} {code}")),
                    format!("refused a {op}: {code}"),
                ),
                None => return,
            },
            Event::Trouble {
                error,
                failures,
                retry_in,
            } => (
                Some("trouble".to_owned()),
                format!(
                    "{error} (failed {failures} time(s) in a row; trying again in {} ms; serving \
                     on)",
                    retry_in.as_millis()
                ),
            ),
            Event::Recovered { failures } => {
                (None, format!("working again after {failures} failure(s)"))
            }
            Event::Swept { logs } => (
                None,
                format!("removed {logs} log(s) of attempts past their retention"),
            ),
            Event::Connection(error) => (
                Some(format!("connection {}", connection_key(error))),
                format!("connection: {}", exit::chain(error)),
            ),
            Event::Tick => return,
        };
        let Some(key) = key else {
            errln!("worklane: {now} {line}");
            return;
        };
        let at = std::time::Instant::now();
        match self.seen.get_mut(&key) {
            Some((since, left_out)) if at.duration_since(*since) < QUIET_FOR => {
                *left_out += 1;
            }
            Some((since, left_out)) => {
                let more = std::mem::take(left_out);
                *since = at;
                if more > 0 {
                    errln!("worklane: {now} {line} (and {more} more like it in the last minute)");
                } else {
                    errln!("worklane: {now} {line}");
                }
            }
            None => {
                // Forget the oldest keys past a bound: a line's key names an attempt or a peer.
                if self.seen.len() > 4096 {
                    self.seen
                        .retain(|_, (since, _)| at.duration_since(*since) < QUIET_FOR);
                }
                self.seen.insert(key, (at, 0));
                errln!("worklane: {now} {line}");
            }
        }
    }
}

/// A connection error's kind and peer, so that one peer's repeated trouble is said once.
fn connection_key(error: &worklane_dispatch::server::ConnectionError) -> String {
    use worklane_dispatch::server::ConnectionError as C;
    match error {
        C::Stranger { uid, .. } => format!("stranger {uid}"),
        C::Timeout { uid, .. } => format!("timeout {uid}"),
        C::Evicted { uid } => format!("evicted {uid}"),
        C::Accept(_) => "accept".to_owned(),
        C::Credentials(_) => "credentials".to_owned(),
        C::Receive(_) => "receive".to_owned(),
        C::Reply { op, .. } => format!("reply {op}"),
        _ => "other".to_owned(),
    }
}

fn failure_words(failure: &StartFailure) -> String {
    match failure {
        StartFailure::Retry {
            failures,
            retry_at_ms,
        } => format!(
            "queued again ({failures} failed start(s)); next start at {}",
            rfc3339_ms(*retry_at_ms)
        ),
        StartFailure::Parked { failures } => format!(
            "parked as failed after {failures} failed starts: `worklane queue retry` queues it \
             again, `worklane queue cancel` drops it"
        ),
        StartFailure::Host => {
            "the machine's own trouble: queued again, every admission backing off".to_owned()
        }
    }
}
