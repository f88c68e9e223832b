//! `--status-fd N` of `run` and `lease run`: worklane's own account of a run, one JSON line per
//! event, on a descriptor the caller passed, so that a harness can tell worklane's exit codes
//! (64, 69, 75, 78...) from its command's (schema in docs/json.md).
//!
//! Events: `waiting` (once, when the run first has to wait), `taken` (the slot or lease is held;
//! the command starts next), then exactly one of `end` (after `taken`: the exit status worklane
//! ends with, and what halted the command), `refused` (busy or refused by STOP or a drain, before
//! anything was taken) or `error` (any other failure before anything was taken). The descriptor
//! is close-on-exec, so the command never inherits it, and it closes when worklane exits.
//!
//! Writing is best effort: a reader that went away (EPIPE) or a failed write never changes what
//! the run does; the first failure is reported on stderr and later events are dropped.

use crate::exit::{self, Failure};
use crate::json::VERSION;
use serde::Serialize;
use std::io::Write;

/// What halted the command, in an `end` event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum HaltedBy {
    /// An emergency STOP: worklane halted it.
    Stop,
    /// The role lease was lost: worklane halted it (and exits 69).
    LeaseLost,
    /// A signal ended it (worklane then ends by the same signal).
    Signal,
}

/// One event.
#[derive(Debug, Serialize)]
#[serde(tag = "event", rename_all = "lowercase")]
enum Event<'a> {
    Waiting {
        kind: &'a str,
        why: &'a str,
    },
    Taken {
        kind: &'a str,
        slot: &'a str,
        epoch: u64,
    },
    End {
        exit: u8,
        halted_by: Option<HaltedBy>,
    },
    Refused {
        exit: u8,
        message: &'a str,
    },
    Error {
        exit: u8,
        message: &'a str,
    },
}

/// One line: the version, then the event's fields.
#[derive(Debug, Serialize)]
struct Line<'a> {
    version: u32,
    #[serde(flatten)]
    event: Event<'a>,
}

/// The status descriptor of one run (none without `--status-fd`).
pub(crate) struct Status {
    out: Option<std::fs::File>,
    waiting: bool,
    taken: bool,
    ended: bool,
}

impl Status {
    /// Claims descriptor `fd` (`--status-fd`): 64 when it is not open for writing or is one of
    /// the command's own 0, 1 and 2. Call it before anything else opens a descriptor.
    pub(crate) fn claim(fd: Option<i32>) -> Result<Status, Failure> {
        let out = match fd {
            None => None,
            Some(n @ 0..=2) => {
                return Err(Failure::new(
                    exit::USAGE,
                    format!(
                        "--status-fd {n}: descriptors 0, 1 and 2 are the command's stdin, stdout \
                         and stderr; pass the status on 3 or above"
                    ),
                ));
            }
            Some(n) => {
                let owned = worklane_run::process::take_inherited_fd(n).map_err(|e| {
                    use worklane_run::process::BadFd;
                    let why = match e {
                        BadFd::Closed => "it is not open".to_owned(),
                        BadFd::ReadOnly => "it is open for reading only".to_owned(),
                        BadFd::Other(e) => format!("it cannot be used: {e}"),
                        BadFd::Taken => "it was taken already".to_owned(),
                    };
                    Failure::new(
                        exit::USAGE,
                        format!(
                            "--status-fd {n}: {why}; open it for writing in the caller (e.g. \
                             `3>&1`, or pass_fds in Python)"
                        ),
                    )
                })?;
                Some(std::fs::File::from(owned))
            }
        };
        Ok(Status {
            out,
            waiting: false,
            taken: false,
            ended: false,
        })
    }

    fn write(&mut self, event: Event<'_>) {
        let Some(out) = self.out.as_mut() else {
            return;
        };
        let mut line = serde_json::to_vec(&Line {
            version: VERSION,
            event,
        })
        .unwrap_or_default();
        line.push(b'\n');
        if let Err(e) = out.write_all(&line) {
            if e.kind() != std::io::ErrorKind::BrokenPipe {
                crate::out::errln!("worklane: --status-fd: cannot write the status: {e}");
            }
            self.out = None;
        }
    }

    /// The run has to wait (written once, at the first wait).
    pub(crate) fn waiting(&mut self, kind: &str, why: &str) {
        if !self.waiting {
            self.waiting = true;
            self.write(Event::Waiting { kind, why });
        }
    }

    /// The slot or lease is held; the command starts next.
    pub(crate) fn taken(&mut self, kind: &str, slot: &str, epoch: u64) {
        self.taken = true;
        self.write(Event::Taken { kind, slot, epoch });
    }

    /// The run is over and worklane exits with `exit` (or, for [`HaltedBy::Signal`], ends by
    /// the signal, which a shell shows as `exit`).
    pub(crate) fn end(&mut self, exit: u8, halted_by: Option<HaltedBy>) {
        if !self.ended {
            self.ended = true;
            self.write(Event::End { exit, halted_by });
        }
    }

    /// The run was refused (busy, STOP, drain) before anything was taken.
    pub(crate) fn refused(&mut self, failure: &Failure) {
        if !self.ended {
            self.ended = true;
            self.write(Event::Refused {
                exit: failure.code,
                message: &failure.message,
            });
        }
    }

    /// The last word on a run that failed: `end` after `taken`, else `error`, unless an event
    /// already ended it.
    pub(crate) fn failed(&mut self, failure: &Failure) {
        if self.ended {
            return;
        }
        if self.taken {
            self.end(failure.code, None);
        } else {
            self.ended = true;
            self.write(Event::Error {
                exit: failure.code,
                message: &failure.message,
            });
        }
    }
}

/// What halted the command, for `--status-fd`'s `end`: a halt worklane made (`halt`), else a
/// signal that ended it.
pub(crate) fn halted_by(outcome: &worklane_run::Outcome, halt: HaltedBy) -> Option<HaltedBy> {
    if outcome.halted.is_some() {
        Some(halt)
    } else if outcome.signal.is_some() {
        Some(HaltedBy::Signal)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(event: Event<'_>) -> String {
        serde_json::to_string(&Line {
            version: VERSION,
            event,
        })
        .expect("serializes")
    }

    #[test]
    fn every_event_is_one_versioned_object() {
        assert_eq!(
            line(Event::Taken {
                kind: "agent",
                slot: "agent-0.lock",
                epoch: 7
            }),
            r#"{"version":1,"event":"taken","kind":"agent","slot":"agent-0.lock","epoch":7}"#
        );
        assert_eq!(
            line(Event::End {
                exit: 143,
                halted_by: Some(HaltedBy::LeaseLost)
            }),
            r#"{"version":1,"event":"end","exit":143,"halted_by":"lease-lost"}"#
        );
        assert_eq!(
            line(Event::End {
                exit: 0,
                halted_by: None
            }),
            r#"{"version":1,"event":"end","exit":0,"halted_by":null}"#
        );
        assert_eq!(
            line(Event::Refused {
                exit: 75,
                message: "busy"
            }),
            r#"{"version":1,"event":"refused","exit":75,"message":"busy"}"#
        );
    }
}
