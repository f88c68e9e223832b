//! The line of a lane's waiting requests: only its head tries the budget, so that at a reset
//! the calls go in the order they came, not in whichever order their timers fire.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::watch;

/// The requests of a lane that wait for the budget, in the order they began to wait: only the
/// first tries it; the others wait for it to go or give up, so that at a reset the calls go
/// in their order, not in whichever order their timers fire.
pub(crate) struct Line {
    queue: Mutex<VecDeque<u64>>,
    next: AtomicU64,
    /// Bumped when one leaves, as the lane's worker bumps it for each response recorded.
    changed: Arc<watch::Sender<u64>>,
}

impl Line {
    /// An empty line whose leavers bump `changed`.
    pub(crate) fn new(changed: Arc<watch::Sender<u64>>) -> Line {
        Line {
            queue: Mutex::new(VecDeque::new()),
            next: AtomicU64::new(0),
            changed,
        }
    }

    fn queue(&self) -> std::sync::MutexGuard<'_, VecDeque<u64>> {
        self.queue
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A place at the back.
    pub(crate) fn join(self: &Arc<Line>) -> Ticket {
        let id = self.next.fetch_add(1, Ordering::SeqCst);
        self.queue().push_back(id);
        Ticket {
            line: Arc::clone(self),
            id,
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.queue().is_empty()
    }
}

/// A request's place in its lane's [`Line`], left when dropped.
pub(crate) struct Ticket {
    line: Arc<Line>,
    id: u64,
}

impl Ticket {
    pub(crate) fn first(&self) -> bool {
        self.line.queue().front() == Some(&self.id)
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.line.queue().retain(|id| *id != self.id);
        // The next one tries at once.
        self.line.changed.send_modify(|n| *n = n.wrapping_add(1));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_first_in_line_tries_and_a_leaver_wakes_the_rest() {
        let (changed, mut seen) = watch::channel(0u64);
        let line = Arc::new(Line::new(Arc::new(changed)));
        assert!(line.is_empty(), "a new line is empty");
        let a = line.join();
        assert!(!line.is_empty(), "one waits");
        let b = line.join();
        let c = line.join();
        assert!(
            a.first() && !b.first() && !c.first(),
            "the first to come is first"
        );
        assert!(!seen.has_changed().expect("open"), "joining wakes nobody");
        drop(b);
        assert!(seen.has_changed().expect("open"), "a leaver wakes the line");
        seen.borrow_and_update();
        assert!(
            a.first() && !c.first(),
            "one from the middle leaves its place alone"
        );
        drop(a);
        assert!(
            seen.has_changed().expect("open"),
            "the first leaving wakes the next"
        );
        assert!(c.first(), "the next is first once those before it left");
        drop(c);
        assert!(line.is_empty(), "all left");
    }
}
