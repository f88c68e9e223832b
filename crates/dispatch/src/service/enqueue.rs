//! Enqueue: a launcher's held lane taken in as a queued row, within the bounds that keep one
//! user from starving the others.

use super::*;

impl Dispatcher {
    /// Handles an enqueue from `caller` with the descriptors that came with it: the new
    /// attempt, or why it was refused. Every refusal closes every descriptor (they are
    /// dropped); an accepted row is committed before this returns.
    pub fn enqueue(
        &mut self,
        entry: Enqueue,
        mut fds: Vec<OwnedFd>,
        caller: &Caller,
    ) -> Result<Result<Enqueued, EnqueueRefused>, Error> {
        if fds.len() != 1 {
            return Ok(Err(EnqueueRefused::Descriptors { count: fds.len() }));
        }
        if self.settings.mode == Mode::Waiter {
            return Ok(Err(EnqueueRefused::WaiterMode));
        }
        if self.euid != 0 && caller.uid != self.euid {
            return Ok(Err(EnqueueRefused::OtherUser {
                euid: self.euid,
                uid: caller.uid,
            }));
        }
        if !valid_lane(&entry.lane) {
            return Ok(Err(EnqueueRefused::BadLane { lane: entry.lane }));
        }
        match (is_own_lane(&entry.lane), entry.own_lane) {
            (true, false) => return Ok(Err(EnqueueRefused::ReservedLane { lane: entry.lane })),
            (false, true) => return Ok(Err(EnqueueRefused::NotOwnLane { lane: entry.lane })),
            _ => {}
        }
        let (Some(start_ms), Some(priority)) = (entry.start_ms, entry.priority) else {
            return Ok(Err(EnqueueRefused::MissingField));
        };
        if let Some(refused) = self.refuse_ask(&entry, caller) {
            return Ok(Err(refused));
        }
        if let Some(refused) = self.refuse_over_bounds(caller)? {
            return Ok(Err(refused));
        }
        let lock = lane_lock(&entry.lane);
        let fd = fds.remove(0);
        if let Some(refused) = self.refuse_descriptor(&fd, &lock) {
            return Ok(Err(refused));
        }
        let dir = self.pool.dir();
        let lane = match Guard::from_received(fd, dir, dir.path(), &lock) {
            Ok(guard) => guard,
            Err(worklane_guard::acquire::Error::NotHeld { .. }) => {
                return Ok(Err(EnqueueRefused::NotHeld { lock }));
            }
            // The dispatcher's own trouble (no descriptor left to open the guard with) is not
            // the sender's: said as the dispatcher's failure.
            Err(worklane_guard::acquire::Error::Io { source, .. })
                if matches!(
                    rustix::io::Errno::from_io_error(&source),
                    Some(rustix::io::Errno::MFILE | rustix::io::Errno::NFILE)
                ) =>
            {
                return Ok(Err(EnqueueRefused::NoDescriptorToCheck {
                    lock,
                    error: source,
                }));
            }
            Err(e) => {
                return Ok(Err(EnqueueRefused::NotTheLane {
                    lock,
                    error: Box::new(e),
                }));
            }
        };
        // A run of the lane that ended a moment ago (we hold its lock now, so it did) is
        // finished first; any other row of the lane makes this one a second.
        if let Some(previous) =
            self.store
                .lane_row(&entry.lane)
                .map_err(|source| Error::LookUpLane {
                    lane: entry.lane.clone(),
                    source: Box::new(source),
                })?
        {
            if previous.state == State::Running {
                self.finish(&previous, None)?;
            } else {
                return Ok(Err(EnqueueRefused::LaneQueued { lane: entry.lane }));
            }
        }
        let now = self.now();
        // The launcher's record names the epoch it acquired the lane at (read under the guard
        // we now hold); recovery compares it with the lane's epoch then.
        let lane_epoch = self
            .pool
            .dir()
            .file(&lock)
            .ok()
            .and_then(|path| worklane_lease::read_record(&path).ok().flatten())
            .and_then(|r| r.epoch);
        let attempt = Attempt {
            placement: entry.placement,
            args: entry.args,
            stage: entry.stage,
            env: self
                .settings
                .env
                .keep(entry.env.into_iter().map(|(k, v)| (k.into(), v.into()))),
            lane_epoch,
            enqueuer: Some(caller.enqueuer()),
            own_lane: entry.own_lane,
            weight: entry.weight.unwrap_or(1),
            owner: entry.owner,
            ..Attempt::queued(
                format!("a-{}", random_hex()),
                entry.lane,
                start_ms,
                priority,
                now,
            )
        };
        self.store
            .insert(&attempt)
            .map_err(|source| Error::Insert {
                attempt: attempt.id.clone(),
                lane: attempt.lane.clone(),
                source: Box::new(source),
            })?;
        self.pool.journal().emit(Event::DispatchEnqueued {
            attempt: attempt.id.clone(),
            lane: attempt.lane.clone(),
            priority: attempt.priority,
            uid: caller.uid,
        });
        self.held
            .insert(attempt.id.clone(), Held { lane, slot: None });
        Ok(Ok(Enqueued {
            attempt: attempt.id,
        }))
    }

    /// A refusal of an enqueue by `caller` (not root: root is never bounded) past the bounds
    /// that keep one user from starving the others: its rows waiting
    /// ([`Settings::max_rows_per_user`]), and the descriptors left to the process (each row
    /// holds one; [`DESCRIPTOR_RESERVE`] are kept for root and for every other request).
    pub(super) fn refuse_over_bounds(
        &self,
        caller: &Caller,
    ) -> Result<Option<EnqueueRefused>, Error> {
        if caller.uid == 0 {
            return Ok(None);
        }
        let waiting = self
            .store
            .waiting_of(caller.uid)
            .map_err(Error::read_queue("count a user's waiting attempts"))?;
        if waiting >= self.settings.max_rows_per_user {
            return Ok(Some(EnqueueRefused::TooManyRows {
                uid: caller.uid,
                waiting,
                max: self.settings.max_rows_per_user,
            }));
        }
        if let Some(left) = descriptors_left()
            && left < DESCRIPTOR_RESERVE
        {
            return Ok(Some(EnqueueRefused::NoDescriptorsToSpare { left }));
        }
        Ok(None)
    }

    /// A refusal for a descriptor that cannot be the lane's guard, named by what it is (a
    /// pipe, a directory, a socket), or for a guard whose lock nobody holds: a launcher must
    /// hold the lane it hands over.
    pub(super) fn refuse_descriptor(&self, fd: &OwnedFd, lock: &str) -> Option<EnqueueRefused> {
        use rustix::fs::FileType;
        let kind = match rustix::fs::fstat(fd) {
            Ok(stat) => FileType::from_raw_mode(stat.st_mode),
            Err(errno) => return Some(EnqueueRefused::Unexaminable { errno }),
        };
        if kind != FileType::RegularFile {
            return Some(EnqueueRefused::NotAFile {
                kind,
                lock: lock.to_owned(),
            });
        }
        // The lane's guard (device and inode as the name's), but free (a fresh description
        // of it takes its lock): nobody holds the lane, so neither does the sender. (Another
        // file is refused by the guard's own check, naming it.)
        let path = self.pool.dir().file(lock).ok()?;
        let sent = rustix::fs::fstat(fd).ok()?;
        #[allow(clippy::useless_conversion, clippy::unnecessary_cast)]
        let same = path
            .guard_id()
            .is_some_and(|id| (id.dev, id.ino) == (sent.st_dev as u64, sent.st_ino as u64));
        if !same {
            return None;
        }
        if let Ok(Some(free)) = path.try_guard() {
            drop(free);
            return Some(EnqueueRefused::LockFree {
                lock: lock.to_owned(),
            });
        }
        None
    }
}

/// How many more descriptors this process may open (its soft limit less those open, counted
/// in `/proc/self/fd`); `None` where that cannot be told.
pub(super) fn descriptors_left() -> Option<u64> {
    let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile).current?;
    let open = std::fs::read_dir("/proc/self/fd").ok()?.count();
    Some(limit.saturating_sub(u64::try_from(open).unwrap_or(u64::MAX)))
}
