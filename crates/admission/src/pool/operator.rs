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
