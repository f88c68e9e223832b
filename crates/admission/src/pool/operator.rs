//! The operator's state as the pool reads and writes it: STOP and the drain flag.

use super::blocker::Blocker;
use super::{Pool, file_in};
use crate::Error;
use crate::drain::{DRAIN_FILE, DrainState};
use crate::stop::{self, Stop};
use worklane_journal::Event;
use worklane_slotfile::SlotDir;

impl Pool {
    /// The emergency STOP, if in force.
    pub fn stop(&self) -> Result<Option<Stop>, Error> {
        stop::read(&self.dir)
    }

    fn drain_dir(&self) -> Result<SlotDir, worklane_slotfile::open::Error> {
        if self.locations.drain_dir == self.locations.slot_dir {
            Ok(self.dir.clone())
        } else {
            SlotDir::open_in(&self.env, &self.locations.drain_dir)
        }
    }

    /// The drain flag's directory, opened to change the flag.
    fn drain_dir_to_change(&self) -> Result<SlotDir, Error> {
        self.drain_dir().map_err(|source| Error::DrainDir {
            dir: self.locations.drain_dir.clone(),
            source,
        })
    }

    /// The drain flag and whether it is in force now.
    pub fn drain(&self) -> Result<DrainState, Error> {
        let raw = match self.drain_dir() {
            Ok(dir) => match file_in(&dir, DRAIN_FILE)?.read() {
                Ok(None) => None,
                Ok(Some(raw)) => Some(Ok(raw)),
                Err(e) => Some(Err(e.to_string())),
            },
            // A missing /var/lib/worklane means no flag.
            Err(worklane_slotfile::open::Error::Missing { .. }) => None,
            Err(e) => Some(Err(e.to_string())),
        };
        Ok(DrainState::decide(raw, self.clock.now_ms()))
    }

    /// Writes the drain flag (`update-drain.json`, mode 0644).
    pub fn write_drain(&self, drain: &crate::drain::Drain) -> Result<(), Error> {
        let mut bytes = serde_json::to_vec(drain).unwrap_or_default();
        bytes.push(b'\n');
        let dir = self.drain_dir_to_change()?;
        super::replace_over_empty_dir(&file_in(&dir, DRAIN_FILE)?, &bytes, 0o644).map_err(
            |source| Error::WriteDrain {
                dir: dir.path().to_owned(),
                source,
            },
        )?;
        self.journal.emit(Event::Drain {
            until: drain.until.clone(),
            to: drain.to.clone(),
        });
        Ok(())
    }

    /// Removes the drain flag, whatever file it is, or an empty directory at its name;
    /// `Ok(false)` if there was none.
    pub fn remove_drain(&self) -> Result<bool, Error> {
        let dir = self.drain_dir_to_change()?;
        let removed = file_in(&dir, DRAIN_FILE)?
            .remove_entry()
            .map_err(|source| Error::RemoveDrain {
                dir: dir.path().to_owned(),
                source: Box::new(source),
            })?;
        if removed {
            self.journal.emit(Event::Undrain);
        }
        Ok(removed)
    }

    /// What STOP or drain blocks every new slot, if anything.
    pub fn operator_blocker(&self) -> Result<Option<Blocker>, Error> {
        if let Some(stop) = self.stop()? {
            return Ok(Some(Blocker::Stop(stop)));
        }
        if let DrainState::InForce(drain) = self.drain()? {
            return Ok(Some(Blocker::Drain(drain)));
        }
        Ok(None)
    }
}

/// Why an extension cannot be dropped: what still uses it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Dropped {
    /// It was named and is no longer.
    Dropped,
    /// It was not named.
    NotNamed,
    /// Something uses it (each in words: `agent-1.lock holds 3 units`, `the config's shares`).
    InUse(Vec<String>),
}

impl Pool {
    /// The directory's `protocol.json`, if this worklane may act under it: a higher level, an
    /// unknown extension or an unreadable file is [`Error::Protocol`].
    pub fn protocol(&self) -> Result<crate::protocol::Protocol, Error> {
        crate::protocol::check_dir(&self.dir).map_err(|why| Error::Protocol {
            dir: self.dir.path().to_owned(),
            why,
        })
    }

    /// Declares `extension` in `protocol.json` under `slots.lock`, held by the caller (a take
    /// that uses it); `Ok(true)` when it was added now.
    pub(super) fn declare_held(&self, extension: &str) -> Result<bool, Error> {
        let protocol = self.protocol()?;
        let added = crate::protocol::declare(&self.dir, protocol, extension)?;
        if added {
            log::info!(
                "the slot directory now uses the protocol extension {extension:?} \
                 (protocol.json): implementations that do not know it refuse to take slots here"
            );
        }
        Ok(added)
    }

    /// Declares `extension` in `protocol.json` (under `slots.lock`), for an operator's change
    /// that starts using it (`config set shares`); `Ok(true)` when it was added now.
    pub fn declare_extension(&self, extension: &str) -> Result<bool, Error> {
        // Named already (the common case): no lock needed, as a take never removes one.
        if self.protocol()?.extensions.iter().any(|e| e == extension) {
            return Ok(false);
        }
        let counting = self.hold_slots_lock_for_change()?;
        let added = self.declare_held(extension);
        counting.release().map_err(|source| Error::Counted {
            kind: "agent",
            source,
        })?;
        added
    }

    /// Removes `extension` from `protocol.json` (under `slots.lock`) when nothing uses it: for
    /// `weights`, no live agent or test slot counts for more than one unit and the config has no
    /// `shares`; for `cgroups`, no held slot's record names a cgroup. An extension this worklane does not know cannot be checked, so it is never
    /// dropped here ([`Error::Protocol`]).
    pub fn drop_extension(&self, extension: &str) -> Result<Dropped, Error> {
        let read = crate::protocol::read(&self.dir).map_err(|why| Error::Protocol {
            dir: self.dir.path().to_owned(),
            why,
        })?;
        if !crate::protocol::KNOWN.contains(&extension) {
            return Err(Error::Protocol {
                dir: self.dir.path().to_owned(),
                why: crate::protocol::Unsupported::Extension {
                    name: extension.to_owned(),
                },
            });
        }
        if !read.extensions.iter().any(|e| e == extension) {
            return Ok(Dropped::NotNamed);
        }
        let counting = self.hold_slots_lock_for_change()?;
        let outcome = self.drop_held(extension);
        counting.release().map_err(|source| Error::Counted {
            kind: "agent",
            source,
        })?;
        outcome
    }

    fn drop_held(&self, extension: &str) -> Result<Dropped, Error> {
        let mut protocol = crate::protocol::read(&self.dir).map_err(|why| Error::Protocol {
            dir: self.dir.path().to_owned(),
            why,
        })?;
        let mut users = Vec::new();
        if extension == crate::protocol::WEIGHTS
            && let Ok(config) = self.config()
            && !config.shares.is_empty()
        {
            users.push("the config's shares".to_owned());
        }
        for view in self.snapshot()?.slots {
            let uses = match extension {
                crate::protocol::WEIGHTS => matches!(view.kind, "agent" | "test") && view.units > 1,
                // A held slot whose record names a cgroup.
                _ => {
                    view.state.is_held()
                        && view.record.as_ref().is_some_and(|r| {
                            r.extra_str(worklane_identity::cgroup::RECORD_FIELD)
                                .is_some()
                        })
                }
            };
            if uses {
                users.push(match extension {
                    crate::protocol::WEIGHTS => format!("{} holds {} units", view.name, view.units),
                    _ => format!("{} is held by a run with a cgroup", view.name),
                });
            }
        }
        if !users.is_empty() {
            return Ok(Dropped::InUse(users));
        }
        protocol.extensions.retain(|e| e != extension);
        crate::protocol::write(&self.dir, &protocol)?;
        Ok(Dropped::Dropped)
    }
}
