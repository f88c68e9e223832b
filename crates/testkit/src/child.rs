//! A started child that cannot outlive its test.

use std::io;
use std::process::Output;

/// A child started through the gate ([`Gated::spawn_gated`](crate::Gated::spawn_gated)). It
/// dereferences to [`std::process::Child`]; if it is dropped while still running (the test
/// ended early, or failed), it is SIGKILLed and reaped, so no test leaves it behind. Its own
/// children are not reached: give them a way to end (a closed pipe) or use a
/// [`Scope`](crate::Scope).
#[derive(Debug)]
pub struct Child(Option<std::process::Child>);

impl Child {
    pub(crate) fn new(child: std::process::Child) -> Child {
        Child(Some(child))
    }

    /// Waits for the child and collects its output, as
    /// [`std::process::Child::wait_with_output`] does.
    pub fn wait_with_output(mut self) -> io::Result<Output> {
        self.0
            .take()
            .expect("a Child holds its process until it is waited for")
            .wait_with_output()
    }
}

impl std::ops::Deref for Child {
    type Target = std::process::Child;
    fn deref(&self) -> &std::process::Child {
        self.0
            .as_ref()
            .expect("a Child holds its process until it is waited for")
    }
}

impl std::ops::DerefMut for Child {
    fn deref_mut(&mut self) -> &mut std::process::Child {
        self.0
            .as_mut()
            .expect("a Child holds its process until it is waited for")
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        let Some(child) = self.0.as_mut() else {
            return;
        };
        // std never signals a child it has already reaped, so no reused pid is hit.
        if matches!(child.try_wait(), Ok(None)) {
            let _ = child.kill();
        }
        let _ = child.wait();
    }
}
