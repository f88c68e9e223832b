//! The operator's state as the pool reads and writes it: STOP and the drain flag.

use super::blocker::Blocker;
use super::{Pool, file_in};
use crate::drain::{DRAIN_FILE, DrainState};
use crate::error::{operator, take};
use crate::look;
use crate::protocol::{self, PROTOCOL_FILE, Unsupported};
use crate::stop::{self, Stop};
use std::path::PathBuf;
use worklane_journal::Event;
use worklane_slotfile::SlotDir;

impl Pool {
    /// The emergency STOP, if in force.
    pub fn stop(&self) -> Result<Option<Stop>, look::Error> {
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
    fn drain_dir_to_change(&self) -> Result<SlotDir, operator::Error> {
        self.drain_dir()
            .map_err(|source| operator::Error::DrainDir {
                dir: self.locations.drain_dir.clone(),
                source,
            })
    }

    /// The drain flag and whether it is in force now.
    pub fn drain(&self) -> Result<DrainState, look::Error> {
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
    pub fn write_drain(&self, drain: &crate::drain::Drain) -> Result<(), operator::Error> {
        let mut bytes = serde_json::to_vec(drain).unwrap_or_default();
        bytes.push(b'\n');
        let dir = self.drain_dir_to_change()?;
        super::replace_over_empty_dir(&file_in(&dir, DRAIN_FILE)?, &bytes, 0o644).map_err(
            |source| operator::Error::WriteDrain {
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
    pub fn remove_drain(&self) -> Result<bool, operator::Error> {
        let dir = self.drain_dir_to_change()?;
        let removed = file_in(&dir, DRAIN_FILE)?
            .remove_entry()
            .map_err(|source| operator::Error::RemoveDrain {
                dir: dir.path().to_owned(),
                source: Box::new(source),
            })?;
        if removed {
            self.journal.emit(Event::Undrain);
        }
        Ok(removed)
    }

    /// What STOP or drain blocks every new slot, if anything.
    pub fn operator_blocker(&self) -> Result<Option<Blocker>, look::Error> {
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

/// Why an extension could not be declared in `protocol.json`, said by its caller as its own
/// step: a take's ([`take::Error`]) or an operator's change's ([`protocol::Error`]).
pub(super) enum Undeclared {
    /// The directory's protocol is not kept here.
    Protocol { dir: PathBuf, why: Unsupported },
    /// `protocol.json` could not be named.
    Look(look::Error),
    /// `protocol.json` could not be written.
    Write {
        dir: PathBuf,
        source: worklane_slotfile::write::Error,
    },
}

impl From<Undeclared> for take::Error {
    fn from(undeclared: Undeclared) -> take::Error {
        match undeclared {
            Undeclared::Protocol { dir, why } => take::Error::Protocol { dir, why },
            Undeclared::Look(look) => take::Error::Look(look),
            Undeclared::Write { dir, source } => take::Error::WriteProtocol { dir, source },
        }
    }
}

impl From<Undeclared> for protocol::Error {
    fn from(undeclared: Undeclared) -> protocol::Error {
        match undeclared {
            Undeclared::Protocol { dir, why } => protocol::Error::Protocol { dir, why },
            Undeclared::Look(look) => protocol::Error::Look(look),
            Undeclared::Write { dir, source } => protocol::Error::WriteProtocol { dir, source },
        }
    }
}

impl Pool {
    /// The directory's `protocol.json`, if this worklane may act under it: a higher level, an
    /// unknown extension or an unreadable file is [`protocol::Error::Protocol`].
    pub fn protocol(&self) -> Result<protocol::Protocol, protocol::Error> {
        protocol::check_dir(&self.dir).map_err(|why| protocol::Error::Protocol {
            dir: self.dir.path().to_owned(),
            why,
        })
    }

    /// Declares `extension` in `protocol.json` under `slots.lock`, held by the caller (a take
    /// that uses it); `Ok(true)` when it was added now.
    pub(super) fn declare_held(&self, extension: &str) -> Result<bool, Undeclared> {
        let dir = || self.dir.path().to_owned();
        let kept = protocol::check_dir(&self.dir)
            .map_err(|why| Undeclared::Protocol { dir: dir(), why })?;
        let file = self.file(PROTOCOL_FILE).map_err(Undeclared::Look)?;
        let added = protocol::declare(&file, kept, extension)
            .map_err(|source| Undeclared::Write { dir: dir(), source })?;
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
    pub fn declare_extension(&self, extension: &str) -> Result<bool, protocol::Error> {
        // Named already (the common case): no lock needed, as a take never removes one.
        if self.protocol()?.extensions.iter().any(|e| e == extension) {
            return Ok(false);
        }
        self.under_slots_lock(|| self.declare_held(extension))
    }

    /// Declares `extension` and runs `use_it` (which writes what uses it: a run naming its
    /// cgroup in its slot's record) under one hold of `slots.lock`, so that an operator's
    /// [`drop_extension`](Pool::drop_extension) either ran before (the extension is declared
    /// anew here) or runs after and sees the use. `use_it` is not run if the extension could
    /// not be declared. Unlike [`declare_extension`](Pool::declare_extension) this takes the
    /// lock even when the extension is named already: that is the case a drop races.
    pub fn using_extension<T>(
        &self,
        extension: &str,
        use_it: impl FnOnce() -> T,
    ) -> Result<T, protocol::Error> {
        let counting = self.hold_slots_lock_for_change()?;
        let used = self.declare_held(extension).map(|_| use_it());
        // The use is made: a release that fails (its record left behind) loses nothing of
        // it, and the lock goes with its descriptor all the same.
        if let Err(e) = counting.release() {
            log::warn!(
                "cannot release slots.lock after declaring {extension:?}: {}",
                worklane_stdx::chain(&e)
            );
        }
        used.map_err(Into::into)
    }

    /// `change` under `slots.lock` (an operator's change of `protocol.json`), the lock released
    /// whatever it returned.
    fn under_slots_lock<T, E: Into<protocol::Error>>(
        &self,
        change: impl FnOnce() -> Result<T, E>,
    ) -> Result<T, protocol::Error> {
        let counting = self.hold_slots_lock_for_change()?;
        let done = change();
        counting
            .release()
            .map_err(|source| protocol::Error::Counted {
                kind: "agent",
                source,
            })?;
        done.map_err(Into::into)
    }

    /// Removes `extension` from `protocol.json` (under `slots.lock`) when nothing uses it: for
    /// `weights`, no live agent or test slot counts for more than one unit and the config has no
    /// `shares`; for `cgroups`, no held slot's record names a cgroup. An extension this
    /// worklane does not know cannot be checked, so it is never dropped here
    /// ([`protocol::Error::Protocol`]).
    pub fn drop_extension(&self, extension: &str) -> Result<Dropped, protocol::Error> {
        let unsupported = |why| protocol::Error::Protocol {
            dir: self.dir.path().to_owned(),
            why,
        };
        let read = protocol::read(&self.dir).map_err(unsupported)?;
        if !protocol::KNOWN.contains(&extension) {
            return Err(unsupported(Unsupported::Extension {
                name: extension.to_owned(),
            }));
        }
        if !read.extensions.iter().any(|e| e == extension) {
            return Ok(Dropped::NotNamed);
        }
        self.under_slots_lock(|| self.drop_held(extension))
    }

    fn drop_held(&self, extension: &str) -> Result<Dropped, protocol::Error> {
        let mut kept = protocol::read(&self.dir).map_err(|why| protocol::Error::Protocol {
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
        kept.extensions.retain(|e| e != extension);
        let file = self.file(PROTOCOL_FILE)?;
        protocol::write(&file, &kept).map_err(|source| protocol::Error::WriteProtocol {
            dir: self.dir.path().to_owned(),
            source,
        })?;
        Ok(Dropped::Dropped)
    }
}
