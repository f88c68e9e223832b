//! What the CLI adds to a supervision ([`worklane_run::Supervisor::watch`]): the halt said on
//! stderr, a fleet place kept alive (`--fleet`), a dispatched attempt's cancel marker (`claim`)
//! and a queued runner's SIGTERM (`queue cancel`).

use crate::out::errln;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use worklane_run::{Started, Supervisor, Watch};

/// The CLI's own watch over a running command; each part is optional.
#[derive(Default)]
pub(crate) struct CliWatch<'a> {
    /// A fleet place (or role) kept alive at each check; its loss halts the command.
    pub(crate) fleet: Option<&'a mut crate::fleet::Place>,
    /// Set when the fleet place was lost.
    pub(crate) lost: bool,
    /// An attempt's cancel marker (`queue cancel` of a running attempt).
    pub(crate) marker: Option<Marker>,
    /// A queued full run's runner was sent SIGTERM.
    pub(crate) cancelled: Option<&'a AtomicBool>,
    /// `--status-fd`'s `taken` (kind, file, epoch), said once what the hold needs is in place
    /// and the command starts next: a reader that then looks at the directory finds the run's
    /// record whole (its cgroup named) and `slots.lock` no longer held for it.
    pub(crate) taken: Option<Taken<'a>>,
}

/// What `taken` says, and where.
pub(crate) struct Taken<'a> {
    pub(crate) status: &'a mut crate::status::Status,
    pub(crate) kind: &'static str,
    pub(crate) slot: String,
    pub(crate) epoch: u64,
}

impl Watch for CliWatch<'_> {
    fn starting(&mut self) {
        if let Some(Taken {
            status,
            kind,
            slot,
            epoch,
        }) = self.taken.take()
        {
            status.taken(kind, &slot, epoch);
        }
    }

    fn started(&mut self, _command: &Started) {}

    fn check(&mut self) -> Option<String> {
        if let Some(place) = self.fleet.as_mut()
            && let Some(reason) = place.check()
        {
            self.lost = true;
            return Some(reason);
        }
        if let Some(cancelled) = self.cancelled
            && cancelled.load(Ordering::Relaxed)
        {
            return Some("the runner was sent SIGTERM (`worklane queue cancel`)".to_owned());
        }
        self.marker.as_mut()?.cancelled()
    }

    fn halting(&mut self, reason: &str, grace: Duration) {
        errln!(
            "worklane: {reason}: halting the command (SIGTERM, then SIGKILL after {} s)",
            crate::out::seconds(grace)
        );
    }
}

/// A dispatched attempt's cancel marker, `queue-<attempt>.cancel` in the slot directory, where
/// every member of the group may write: it counts only if the dispatcher (`writer`, the uid
/// that serves the socket the attempt was claimed on) or root wrote it, no one else can have
/// (no group or other write bit, one name), and it names this attempt as a `queue cancel`.
pub(crate) struct Marker {
    pub(crate) path: worklane_slotfile::SlotPath,
    pub(crate) attempt: String,
    pub(crate) writer: u32,
    /// Whether a marker that does not count was said once already.
    pub(crate) ignored: bool,
}

impl Marker {
    /// Why the command is halted, if the marker is there and counts.
    fn cancelled(&mut self) -> Option<String> {
        let (raw, written) = self.path.read_with_owner().ok().flatten()?;
        let marker: serde_json::Value = serde_json::from_slice(&raw).unwrap_or_default();
        let by_dispatcher =
            (written.uid == self.writer || written.uid == 0) && written.only_by_owner();
        let names_it = marker.get("attempt").and_then(|v| v.as_str())
            == Some(self.attempt.as_str())
            && marker.get("reason").and_then(|v| v.as_str()) == Some("queue cancel");
        if !(by_dispatcher && names_it) {
            if !self.ignored {
                self.ignored = true;
                errln!(
                    "worklane: ignoring {}: it is not the dispatcher's cancel of attempt {} \
                     (owner uid {}, mode {:04o}, {} name(s); the dispatcher runs as uid {})",
                    self.path.name(),
                    self.attempt,
                    written.uid,
                    written.mode,
                    written.links,
                    self.writer
                );
            }
            return None;
        }
        Some(format!(
            "cancelled by `worklane queue cancel` (uid {}) at {}",
            marker.get("by").map_or("?".to_owned(), ToString::to_string),
            marker.get("at").and_then(|v| v.as_str()).unwrap_or("?")
        ))
    }
}

/// With a fleet place, the command fences with the fleet's epoch (it grows across hosts); the
/// host's own epoch stays at hand in `WORKLANE_HOST_EPOCH`, and the grace of a halt is at most
/// a quarter of the place's TTL.
pub(crate) fn with_fleet<'a>(
    supervisor: Supervisor<'a>,
    place: Option<&crate::fleet::Place>,
    host_epoch: u64,
) -> Supervisor<'a> {
    let Some(place) = place else {
        return supervisor;
    };
    supervisor
        .env("WORKLANE_EPOCH", place.epoch().to_string())
        .env("WORKLANE_HOST_EPOCH", host_epoch.to_string())
        .env("WORKLANE_FLEET_KEY", place.key())
        .grace_at_most(place.ttl() / 4)
}

/// Reports a release that failed after the command ended (the exit status is the command's).
pub(crate) fn released(what: &str, result: Result<(), impl std::error::Error>) {
    if let Err(e) = result {
        errln!("worklane: releasing {what}: {}", crate::exit::chain(&e));
    }
}
