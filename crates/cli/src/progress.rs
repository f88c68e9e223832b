//! The live "waiting" line of a take that waits (`run`, `lease run`) and its words.

use std::time::Duration;
use worklane_admission::{Blocker, Waiting};

/// A live "waiting" line on a terminal; silent otherwise.
pub(crate) struct Progress {
    shown: bool,
    on_terminal: bool,
    what: &'static str,
}

impl Progress {
    pub(crate) fn new(what: &'static str) -> Progress {
        Progress {
            shown: false,
            on_terminal: crate::out::stderr_is_terminal() && !crate::out::quiet(),
            what,
        }
    }

    pub(crate) fn update(&mut self, waiting: &Waiting<'_>) {
        self.show(&waiting_line(waiting), waiting.waited);
    }

    pub(crate) fn show(&mut self, line: &str, waited: Duration) {
        if !self.on_terminal {
            return;
        }
        crate::out::to_stderr(format_args!(
            "\r\x1b[2Kworklane: waiting for {}: {line}; waited {}s",
            self.what,
            waited.as_secs()
        ));
        self.shown = true;
    }

    pub(crate) fn clear(&mut self) {
        if self.shown {
            crate::out::to_stderr(format_args!("\r\x1b[2K"));
            self.shown = false;
        }
    }
}

/// `1st`, `2nd`, `3rd`, `4th`, ... `11th`, `12th`, `13th`, `21st`.
fn ordinal(n: u32) -> String {
    let suffix = match (n % 10, n % 100) {
        (_, 11..=13) => "th",
        (1, _) => "st",
        (2, _) => "nd",
        (3, _) => "rd",
        _ => "th",
    };
    format!("{n}{suffix}")
}

/// What the waiting line says: `3rd in line, 2 of 2 held`, or the blocker itself when it is
/// not the line or the cap.
pub(crate) fn waiting_line(waiting: &Waiting<'_>) -> String {
    let place = format!("{} in line", ordinal(waiting.position));
    match waiting.blocker {
        Blocker::AtCap { held, cap } | Blocker::InLine { held, cap, .. } => {
            format!("{place}, {held} of {cap} held")
        }
        other => format!("{place}: {other}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn places_in_line_are_ordinals() {
        let got: Vec<String> = [1, 2, 3, 4, 11, 12, 13, 21, 22, 23, 101, 111, 112]
            .into_iter()
            .map(ordinal)
            .collect();
        assert_eq!(
            got,
            [
                "1st", "2nd", "3rd", "4th", "11th", "12th", "13th", "21st", "22nd", "23rd",
                "101st", "111th", "112th"
            ]
        );
    }

    #[test]
    fn the_waiting_line_says_the_place_and_the_count() {
        let at = |blocker: &Blocker, position| {
            waiting_line(&Waiting {
                blocker,
                waited: Duration::from_secs(12),
                position,
                in_line: 3,
            })
        };
        assert_eq!(
            at(
                &Blocker::InLine {
                    ahead: 2,
                    held: 2,
                    cap: 2
                },
                3
            ),
            "3rd in line, 2 of 2 held"
        );
        assert_eq!(
            at(&Blocker::AtCap { held: 1, cap: 1 }, 1),
            "1st in line, 1 of 1 held"
        );
        assert!(
            at(&Blocker::Counting, 1).starts_with("1st in line: slots.lock has been held"),
            "{}",
            at(&Blocker::Counting, 1)
        );
    }
}
