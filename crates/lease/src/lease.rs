//! A held lease: pulse, re-verify, release.

use crate::clock::Now;
use crate::liveness::GuardHold;
use crate::options::Options;
use crate::record::Record;
use crate::take::take_guard;
use worklane_guard::Guard;
use worklane_journal::Event;
use worklane_slotfile::{RECORD_MODE, Removal, SlotPath};

/// Errors of a held lease's operations.
pub mod held {
    use crate::record::Record;

    /// Why a pulse, check or release did not go through.
    #[derive(Debug, thiserror::Error)]
    #[non_exhaustive]
    pub enum Error {
        /// The record is no longer ours: another process took the lease over (or an operator
        /// removed it). The holder must stop acting on the resource.
        #[error("lease {resource} was lost: {}", describe(.now))]
        LeaseLost {
            /// The resource.
            resource: String,
            /// The record found instead of ours, if any.
            now: Option<Box<Record>>,
        },
        /// The guard stayed busy (another process is inspecting the record), so ownership could
        /// not be verified now. Try again shortly; do not act on the resource until it succeeds.
        #[error("lease {resource} could not be verified: its guard stayed busy; retry shortly")]
        Busy {
            /// The resource.
            resource: String,
        },
        /// [`Lease::annotate`](crate::Lease::annotate) was asked to set a field the core writes itself.
        #[error(
            "lease {resource}: `{field}` is written by worklane itself and cannot be annotated"
        )]
        ReservedField {
            /// The resource.
            resource: String,
            /// The field.
            field: String,
        },
        /// The lease was already released.
        #[error("lease {resource} was already released")]
        Released {
            /// The resource.
            resource: String,
        },
        /// The guard, taken briefly under TTL liveness, could not be taken (not busy: broken).
        #[error("cannot take the guard of lease {resource}")]
        Guard {
            /// The resource.
            resource: String,
            /// Why.
            #[source]
            source: worklane_guard::acquire::Error,
        },
        /// The record could not be read to check that it is still ours.
        #[error("cannot read the record of lease {resource}")]
        Read {
            /// The resource.
            resource: String,
            /// Why.
            #[source]
            source: worklane_slotfile::read::Error,
        },
        /// The record could not be rewritten (a pulse or an annotation).
        #[error("cannot rewrite the record of lease {resource}")]
        Write {
            /// The resource.
            resource: String,
            /// Why.
            #[source]
            source: worklane_slotfile::write::Error,
        },
        /// The record could not be removed on release.
        #[error("cannot remove the record of lease {resource}")]
        Remove {
            /// The resource.
            resource: String,
            /// Why (boxed: the largest cause).
            #[source]
            source: Box<worklane_slotfile::remove::Error>,
        },
    }

    fn describe(now: &Option<Box<Record>>) -> String {
        match now.as_deref() {
            None => "its record is gone".to_owned(),
            Some(r) => match (r.pid(), &r.owner) {
                (Some(pid), Some(owner)) => format!("pid {pid} ({owner}) holds it now"),
                (Some(pid), None) => format!("pid {pid} holds it now"),
                _ => "another record stands in its place".to_owned(),
            },
        }
    }
}

use held::Error;

/// A held lease on one resource.
///
/// Under process liveness it holds the resource's guard for its whole life; under TTL liveness
/// the guard is taken only while the record is changed, and the holder must [`Lease::pulse`]
/// and call [`Lease::ensure_held`] before each mutating action. Dropping it releases it.
#[derive(Debug)]
#[must_use = "the lease is released as soon as it is dropped"]
pub struct Lease {
    path: SlotPath,
    guard: Option<Guard>,
    bytes: Vec<u8>,
    record: Record,
    epoch: u64,
    options: Options,
    last_good_pulse: Now,
    state: State,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Held,
    Lost,
    Released,
}

impl Lease {
    pub(crate) fn new(
        path: SlotPath,
        guard: Option<Guard>,
        bytes: Vec<u8>,
        record: Record,
        epoch: u64,
        options: Options,
        now: Now,
    ) -> Lease {
        Lease {
            path,
            guard,
            bytes,
            record,
            epoch,
            options,
            last_good_pulse: now,
            state: State::Held,
        }
    }

    /// The fencing epoch of this acquisition: larger than every earlier one of the resource.
    #[must_use]
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The record as we wrote it.
    #[must_use]
    pub fn record(&self) -> &Record {
        &self.record
    }

    /// The resource's file name.
    #[must_use]
    pub fn resource(&self) -> &str {
        self.path.name()
    }

    /// The held guard, under process liveness (to pass its descriptor to another process).
    #[must_use]
    pub fn guard(&self) -> Option<&Guard> {
        self.guard.as_ref()
    }

    fn resource_owned(&self) -> String {
        self.path.name().to_owned()
    }

    fn check_state(&self) -> Result<(), Error> {
        match self.state {
            State::Held => Ok(()),
            State::Lost => Err(Error::LeaseLost {
                resource: self.path.name().to_owned(),
                now: self.read_current().map(Box::new),
            }),
            State::Released => Err(Error::Released {
                resource: self.path.name().to_owned(),
            }),
        }
    }

    fn read_current(&self) -> Option<Record> {
        crate::read::read_record(&self.path).ok().flatten()
    }

    /// Runs `f` with the guard held: ours for life, or taken briefly under TTL liveness.
    fn under_guard<T>(
        &mut self,
        f: impl FnOnce(&mut Self) -> Result<T, Error>,
    ) -> Result<T, Error> {
        if self.guard.is_some() {
            return f(self);
        }
        let hold = self.options.liveness.guard_hold();
        let brief = match take_guard(&self.path, hold) {
            Ok(Some(guard)) => guard,
            Ok(None) => {
                return Err(Error::Busy {
                    resource: self.path.name().to_owned(),
                });
            }
            Err(source) => {
                return Err(Error::Guard {
                    resource: self.resource_owned(),
                    source,
                });
            }
        };
        let out = f(self);
        drop(brief);
        out
    }

    /// Proves ownership and refreshes `lastPulse` (TTL leases; harmless under process
    /// liveness): under the guard, checks that the record still holds exactly our bytes, then
    /// replaces it with a new pulse. A record that is no longer ours is
    /// [`held::Error::LeaseLost`], and the lease stays lost.
    pub fn pulse(&mut self) -> Result<(), Error> {
        self.rewrite(true, |_| {})
    }

    /// Adds (or replaces) further fields of the held record, such as the process a supervisor
    /// started under it, the same way as a pulse: under the guard, only while the record still
    /// holds exactly our bytes, replaced whole. The fields the core writes itself
    /// ([`RESERVED_FIELDS`](crate::RESERVED_FIELDS)) are refused; `lastPulse` is not refreshed.
    pub fn annotate(
        &mut self,
        fields: serde_json::Map<String, serde_json::Value>,
    ) -> Result<(), Error> {
        if let Some(field) = fields
            .keys()
            .find(|k| crate::record::RESERVED_FIELDS.contains(&k.as_str()))
        {
            return Err(Error::ReservedField {
                resource: self.path.name().to_owned(),
                field: field.clone(),
            });
        }
        self.rewrite(false, move |record| record.extra.extend(fields))
    }

    fn rewrite(&mut self, pulse: bool, change: impl FnOnce(&mut Record)) -> Result<(), Error> {
        self.check_state()?;
        self.under_guard(|lease| {
            let current = lease.path.read().map_err(|source| Error::Read {
                resource: lease.resource_owned(),
                source,
            })?;
            if current.as_deref() != Some(lease.bytes.as_slice()) {
                lease.state = State::Lost;
                let lost = Error::LeaseLost {
                    resource: lease.path.name().to_owned(),
                    now: current
                        .and_then(|raw| Record::parse(&raw).ok())
                        .map(Box::new),
                };
                if let Some(role) = &lease.options.role {
                    let dir = lease.path.dir();
                    lease.options.journal_in(dir).emit(Event::RoleLost {
                        role: role.to_string(),
                        resource: lease.path.name().to_owned(),
                        why: lost.to_string(),
                    });
                }
                return Err(lost);
            }
            let now = Now::of(&*lease.options.clock);
            let mut record = lease.record.clone();
            change(&mut record);
            if pulse && lease.options.liveness.ttl_ms().is_some() {
                record.last_pulse = Some(now.wall_ms);
                record.pulse_boot = now.boot.clone();
            }
            let bytes = record.to_bytes();
            lease
                .path
                .rewrite(&bytes, RECORD_MODE)
                .map_err(|source| Error::Write {
                    resource: lease.resource_owned(),
                    source,
                })?;
            lease.record = record;
            lease.bytes = bytes;
            if pulse {
                lease.last_good_pulse = now;
            }
            Ok(())
        })
    }

    /// Call before every mutating action. After a gap longer than TTL/2 since the last good
    /// pulse, re-verifies (and refreshes) ownership by a pulse; a lease that is no longer ours
    /// is [`held::Error::LeaseLost`]: stop, never continue silently. Under process liveness the
    /// held guard is the proof and nothing is read.
    pub fn ensure_held(&mut self) -> Result<(), Error> {
        self.check_state()?;
        let Some(ttl) = self.options.liveness.ttl_ms() else {
            return Ok(());
        };
        // By the boot clock where there is one: a step of the wall clock must not hide a gap.
        let gap = Now::of(&*self.options.clock).since(&self.last_good_pulse);
        if gap > ttl / 2 { self.pulse() } else { Ok(()) }
    }

    /// Releases the lease: under the guard, removes the record only if it still holds exactly
    /// our bytes (a successor's record is never touched), then closes the guard. Idempotent.
    pub fn release(mut self) -> Result<(), Error> {
        self.release_inner()
    }

    fn release_inner(&mut self) -> Result<(), Error> {
        if self.state != State::Held {
            self.state = State::Released;
            self.guard = None;
            return Ok(());
        }
        let out = self.under_guard(|lease| {
            let bytes = std::mem::take(&mut lease.bytes);
            let removed = lease.path.remove_if_unchanged(&bytes);
            lease.bytes = bytes;
            if let (Ok(Removal::Removed), Some(role)) = (&removed, &lease.options.role) {
                lease
                    .options
                    .journal_in(lease.path.dir())
                    .emit(Event::RoleReleased {
                        role: role.to_string(),
                        resource: lease.path.name().to_owned(),
                        owner: lease.record.owner.clone().unwrap_or_default(),
                    });
            }
            match removed {
                Ok(Removal::Removed | Removal::Absent | Removal::Changed) => Ok(()),
                Err(source) => Err(Error::Remove {
                    resource: lease.resource_owned(),
                    source: Box::new(source),
                }),
            }
        });
        self.state = State::Released;
        self.guard = None;
        out
    }

    /// Gives the lease up without releasing the resource: the record stays as it is and the held
    /// guard is returned (process liveness; `None` under TTL liveness), for a holder that passes
    /// the guard's descriptor to another process, which takes the lease over with
    /// [`adopt`](crate::adopt()). Once every copy of the guard is closed, the record, which
    /// declares the held guard, is free to take.
    #[must_use]
    pub fn hand_over(mut self) -> Option<Guard> {
        self.state = State::Released;
        self.guard.take()
    }

    /// Whether the guard is held the whole time (process liveness).
    #[must_use]
    pub fn holds_guard_for_life(&self) -> bool {
        self.options.liveness.guard_hold() == GuardHold::ForLife
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        let _ = self.release_inner();
    }
}
