//! The dispatcher's log, as `worklane dispatcher` writes it on its stderr: one line per event
//! of the service loop, with a line that repeats (the same kind, of the same attempt or peer)
//! said at most once a minute, and how many were left out said with the next. The caller
//! prints the lines; this module only words them.

use super::ended_words;
use std::collections::HashMap;
use std::time::{Duration, Instant};
use worklane_dispatch::server::{ConnectionError, Event};
use worklane_dispatch::service::StartFailure;
use worklane_lease::rfc3339_ms;

/// The dispatcher's log: the words of each event, and the repeats left out.
#[derive(Debug, Default)]
pub struct Log {
    seen: HashMap<String, (Instant, u32)>,
}

/// The keys remembered before the quiet ones are forgotten (a key names an attempt or a peer).
const MAX_KEYS: usize = 4096;

/// How long a repeated line stays quiet.
const QUIET_FOR: Duration = Duration::from_secs(60);

impl Log {
    /// The line to say for `event` at `now` (the wall clock's time for the line, the monotonic
    /// one for the quiet minute), or `None` for an event not said or a repeat left out.
    pub fn line(&mut self, event: &Event, now_ms: u64, at: Instant) -> Option<String> {
        let now = rfc3339_ms(now_ms);
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
                None => return None,
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
                format!("connection: {}", worklane_stdx::chain(error)),
            ),
            Event::Tick => return None,
        };
        let Some(key) = key else {
            return Some(format!("{now} {line}"));
        };
        match self.seen.get_mut(&key) {
            Some((since, left_out)) if at.duration_since(*since) < QUIET_FOR => {
                *left_out += 1;
                None
            }
            Some((since, left_out)) => {
                let more = std::mem::take(left_out);
                *since = at;
                Some(if more > 0 {
                    format!("{now} {line} (and {more} more like it in the last minute)")
                } else {
                    format!("{now} {line}")
                })
            }
            None => {
                // Forget the oldest keys past a bound: a line's key names an attempt or a peer.
                if self.seen.len() > MAX_KEYS {
                    self.seen
                        .retain(|_, (since, _)| at.duration_since(*since) < QUIET_FOR);
                }
                self.seen.insert(key, (at, 0));
                Some(format!("{now} {line}"))
            }
        }
    }
}

/// A connection error's kind and peer, so that one peer's repeated trouble is said once.
fn connection_key(error: &ConnectionError) -> String {
    use ConnectionError as C;
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

#[cfg(test)]
mod tests {
    use super::*;

    fn trouble() -> Event {
        Event::Trouble {
            error: "disk full".to_owned(),
            failures: 2,
            retry_in: Duration::from_millis(500),
        }
    }

    #[test]
    fn a_repeated_line_is_said_once_a_minute_with_how_many_were_left_out() {
        let mut log = Log::default();
        let t0 = Instant::now();
        let first = log.line(&trouble(), 0, t0).expect("the first is said");
        assert_eq!(
            first,
            "1970-01-01T00:00:00.000Z disk full (failed 2 time(s) in a row; trying again in \
             500 ms; serving on)"
        );
        assert_eq!(log.line(&trouble(), 1, t0 + Duration::from_secs(1)), None);
        assert_eq!(
            log.line(&trouble(), 2, t0 + QUIET_FOR - Duration::from_millis(1)),
            None,
            "still within the quiet minute"
        );
        let again = log
            .line(&trouble(), 3, t0 + QUIET_FOR)
            .expect("said again once the minute is over");
        assert!(
            again.ends_with("(and 2 more like it in the last minute)"),
            "{again}"
        );
        assert_eq!(
            log.line(&trouble(), 4, t0 + QUIET_FOR + QUIET_FOR),
            Some(
                "1970-01-01T00:00:00.004Z disk full (failed 2 time(s) in a row; trying again \
                 in 500 ms; serving on)"
                    .to_owned()
            ),
            "none left out: no count"
        );
    }

    #[test]
    fn lines_without_a_key_are_always_said_and_ticks_never() {
        let mut log = Log::default();
        let t0 = Instant::now();
        let started = Event::Started {
            attempt: "a-1".to_owned(),
            pid: 42,
        };
        for _ in 0..3 {
            assert_eq!(
                log.line(&started, 0, t0).as_deref(),
                Some("1970-01-01T00:00:00.000Z started the driver of a-1 (pid 42)")
            );
        }
        assert_eq!(log.line(&Event::Tick, 0, t0), None);
        let answered = Event::Answered {
            op: "enqueue",
            refused: None,
        };
        assert_eq!(log.line(&answered, 0, t0), None, "an accepted request");
    }

    #[test]
    fn each_attempt_s_failed_start_has_its_own_quiet_minute_and_parking_is_always_said() {
        let mut log = Log::default();
        let t0 = Instant::now();
        let failed = |attempt: &str, failure| Event::StartFailed {
            attempt: attempt.to_owned(),
            error: "no such file".to_owned(),
            failure,
        };
        let retry = || StartFailure::Retry {
            failures: 1,
            retry_at_ms: 1000,
        };
        assert!(log.line(&failed("a-1", retry()), 0, t0).is_some());
        assert!(
            log.line(&failed("a-2", retry()), 0, t0).is_some(),
            "another attempt"
        );
        assert_eq!(log.line(&failed("a-1", retry()), 0, t0), None, "a repeat");
        let parked = log
            .line(&failed("a-1", StartFailure::Parked { failures: 5 }), 0, t0)
            .expect("parking is said every time");
        assert!(
            parked.contains("parked as failed after 5 failed starts"),
            "{parked}"
        );
    }

    #[test]
    fn the_remembered_keys_are_bounded() {
        let mut log = Log::default();
        let t0 = Instant::now();
        for i in 0..=MAX_KEYS {
            let event = Event::DriverEnded {
                attempt: format!("a-{i}"),
                why: "killed".to_owned(),
                failure: StartFailure::Host,
            };
            assert!(log.line(&event, 0, t0).is_some());
        }
        let late = Event::DriverEnded {
            attempt: "late".to_owned(),
            why: "killed".to_owned(),
            failure: StartFailure::Host,
        };
        assert!(log.line(&late, 0, t0 + QUIET_FOR).is_some());
        assert_eq!(log.seen.len(), 1, "the quiet keys were forgotten");
    }
}
