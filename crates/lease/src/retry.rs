//! How worklane paces a retry of something busy: one helper for every loop that tries again
//! after a pause (a guard held while a record changes, `slots.lock`, a waiter's next look).

use std::time::Duration;

/// The pauses between tries of something busy: a first pause, the same again or doubled after
/// each retry up to a ceiling, for at most a number of retries (or without end).
///
/// It only counts and computes; the caller tries, and sleeps with [`Backoff::sleep`] or waits
/// its own way for the pause its [`Iterator`] gives (a waiter that may be woken early).
///
/// ```
/// use std::time::Duration;
/// use worklane_lease::Backoff;
///
/// let pauses = Backoff::new(Duration::from_millis(25))
///     .doubling_to(Duration::from_millis(80))
///     .retries(4);
/// let ms: Vec<u128> = pauses.map(|d| d.as_millis()).collect();
/// assert_eq!(ms, [25, 50, 80, 80], "doubled up to the ceiling, four retries");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Backoff {
    pause: Duration,
    max: Duration,
    retries: Option<u32>,
}

impl Backoff {
    /// The same `pause` before every retry, without end.
    #[must_use]
    pub const fn new(pause: Duration) -> Backoff {
        Backoff {
            pause,
            max: pause,
            retries: None,
        }
    }

    /// Doubles the pause after each retry, up to `max`.
    #[must_use]
    pub const fn doubling_to(mut self, max: Duration) -> Backoff {
        self.max = max;
        self
    }

    /// At most `retries` retries (tries after the first).
    #[must_use]
    pub const fn retries(mut self, retries: u32) -> Backoff {
        self.retries = Some(retries);
        self
    }

    /// The pause before the next retry, without taking it.
    #[must_use]
    pub fn pause(&self) -> Duration {
        self.pause
    }

    /// Takes one retry and sleeps its pause: `false` (without sleeping) when no retry is left.
    pub fn sleep(&mut self) -> bool {
        match self.next() {
            Some(pause) => {
                std::thread::sleep(pause);
                true
            }
            None => false,
        }
    }

    /// Starts the doubling again from `pause` (something changed: look again soon).
    pub fn restart(&mut self, pause: Duration) {
        self.pause = pause;
    }
}

/// Each item takes one retry: the pause to make before it. The iterator ends when no retry is
/// left (never, without [`Backoff::retries`]). The pause after it doubles (up to the ceiling).
impl Iterator for Backoff {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        if let Some(left) = self.retries.as_mut() {
            *left = left.checked_sub(1)?;
        }
        let pause = self.pause;
        self.pause = pause.saturating_mul(2).min(self.max);
        Some(pause)
    }
}

#[cfg(test)]
mod tests {
    use super::Backoff;
    use std::time::Duration;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn a_fixed_pause_stays_and_the_retries_run_out() {
        let mut b = Backoff::new(ms(1)).retries(2);
        assert_eq!(b.next(), Some(ms(1)), "first retry");
        assert_eq!(b.next(), Some(ms(1)), "same pause");
        assert_eq!(b.next(), None, "two retries only");
        assert_eq!(b.next(), None, "and none later");
        assert_eq!(
            Backoff::new(ms(1)).retries(0).next(),
            None,
            "no retry at all"
        );
    }

    #[test]
    fn sleep_takes_each_retry_with_its_pause_then_says_there_is_none() {
        let mut b = Backoff::new(ms(2)).retries(2);
        let started = std::time::Instant::now();
        assert!(b.sleep(), "first retry");
        assert!(b.sleep(), "second retry");
        assert!(started.elapsed() >= ms(4), "each retry slept its pause");
        assert!(!b.sleep(), "no retry left");
    }

    #[test]
    fn a_doubling_pause_stops_at_its_ceiling_and_restarts() {
        let mut b = Backoff::new(ms(25)).doubling_to(ms(250));
        let got: Vec<_> = (0..6).map(|_| b.next().expect("no end")).collect();
        assert_eq!(got, [ms(25), ms(50), ms(100), ms(200), ms(250), ms(250)]);
        b.restart(ms(2));
        assert_eq!(b.pause(), ms(2), "restarted");
        assert_eq!(b.next(), Some(ms(2)), "from the new pause");
        assert_eq!(b.next(), Some(ms(4)), "doubling again");
    }
}
