//! Enqueue: a launcher's held lane taken in as a queued row, within the bounds that keep one
//! user from starving the others.

use super::*;

impl Dispatcher {
    /// Handles an enqueue from `caller` with the descriptors that came with it. Every refusal
    /// closes every descriptor (they are dropped); an accepted row is committed before the
    /// reply.
    pub fn enqueue(
        &mut self,
        entry: Enqueue,
        mut fds: Vec<OwnedFd>,
        caller: &Caller,
    ) -> Result<Reply, Error> {
        if fds.len() != 1 {
            return Ok(Reply::refused(
                code::DESCRIPTORS,
                format!(
                    "an enqueue carries exactly one descriptor (the lane's guard), not {}",
                    fds.len()
                ),
            ));
        }
        if self.settings.mode == Mode::Waiter {
            return Ok(Reply::refused(
                code::WAITER_MODE,
                "this host admits in waiter mode (\"admission\": \"waiter\" in its config): run \
                 the work with `worklane run` instead of queueing it",
            ));
        }
        if self.euid != 0 && caller.uid != self.euid {
            return Ok(Reply::refused(
                code::PERMISSION,
                format!(
                    "this dispatcher runs as uid {} and starts drivers only as itself, so it \
                     queues no work of uid {}: run the work with `worklane run`, or have the \
                     operator run the dispatcher as root (contrib/systemd), which starts each \
                     driver as the one who enqueued it",
                    self.euid, caller.uid
                ),
            ));
        }
        if !valid_lane(&entry.lane) {
            return Ok(Reply::refused(
                code::BAD_REQUEST,
                format!(
                    "lane {:?}: 1 to 64 letters, digits, `-`, `_` or `.`",
                    entry.lane
                ),
            ));
        }
        match (is_own_lane(&entry.lane), entry.own_lane) {
            (true, false) => {
                return Ok(Reply::refused(
                    code::BAD_REQUEST,
                    format!(
                        "lane {}: names of `q-` and 16 hex digits are reserved for lanes of their \
                         own, which are removed when their attempt ends; choose another name, or \
                         say \"own_lane\": true for a lane made for this attempt alone",
                        entry.lane
                    ),
                ));
            }
            (false, true) => {
                return Ok(Reply::refused(
                    code::BAD_REQUEST,
                    format!(
                        "lane {}: a lane of its own is named `q-` and 16 lowercase hex digits",
                        entry.lane
                    ),
                ));
            }
            _ => {}
        }
        let (Some(start_ms), Some(priority)) = (entry.start_ms, entry.priority) else {
            return Ok(Reply::refused(
                code::MISSING_FIELD,
                "an enqueue must carry its queue start (start_ms) and priority",
            ));
        };
        if let Some(refused) = self.refuse_ask(&entry, caller) {
            return Ok(refused);
        }
        if let Some(refused) = self.refuse_over_bounds(caller)? {
            return Ok(refused);
        }
        let lock = lane_lock(&entry.lane);
        let fd = fds.remove(0);
        if let Some(refused) = self.refuse_descriptor(&fd, &lock) {
            return Ok(refused);
        }
        let dir = self.pool.dir();
        let lane = match Guard::from_received(fd, dir, dir.path(), &lock) {
            Ok(guard) => guard,
            Err(worklane_guard::acquire::Error::NotHeld { .. }) => {
                return Ok(Reply::refused(
                    code::NOT_HELD,
                    format!(
                        "the descriptor is {lock}'s guard but does not hold its lock: another process does"
                    ),
                ));
            }
            // The dispatcher's own trouble (no descriptor left to open the guard with) is not
            // the sender's: said as the dispatcher's failure.
            Err(worklane_guard::acquire::Error::Io { source, .. })
                if matches!(
                    rustix::io::Errno::from_io_error(&source),
                    Some(rustix::io::Errno::MFILE | rustix::io::Errno::NFILE)
                ) =>
            {
                return Ok(Reply::refused(
                    code::INTERNAL,
                    format!(
                        "the dispatcher cannot open {lock}'s guard to check it: it has no \
                         descriptor left ({source}); raise its limit of open files \
                         (LimitNOFILE= under systemd)"
                    ),
                ));
            }
            Err(e) => {
                return Ok(Reply::refused(
                    code::NOT_THE_LANE,
                    format!("the descriptor is not the guard of {lock}: {e}"),
                ));
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
                return Ok(Reply::refused(
                    code::LANE_QUEUED,
                    format!("lane {} is already queued", entry.lane),
                ));
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
        let mut reply = Reply::ok();
        reply.attempt = Some(attempt.id.clone());
        self.held.insert(attempt.id, Held { lane, slot: None });
        Ok(reply)
    }

    /// A refusal of an enqueue by `caller` (not root: root is never bounded) past the bounds
    /// that keep one user from starving the others: its rows waiting
    /// ([`Settings::max_rows_per_user`]), and the descriptors left to the process (each row
    /// holds one; [`DESCRIPTOR_RESERVE`] are kept for root and for every other request).
    pub(super) fn refuse_over_bounds(&self, caller: &Caller) -> Result<Option<Reply>, Error> {
        if caller.uid == 0 {
            return Ok(None);
        }
        let waiting = self
            .store
            .waiting_of(caller.uid)
            .map_err(Error::read_queue("count a user's waiting attempts"))?;
        if waiting >= self.settings.max_rows_per_user {
            return Ok(Some(Reply::refused(
                code::LIMIT,
                format!(
                    "uid {} has {waiting} attempts waiting, the most one user may have (the \
                     dispatcher's --max-rows-per-user {}): enqueue again when some have run, \
                     or cancel some (`worklane queue ls`)",
                    caller.uid, self.settings.max_rows_per_user
                ),
            )));
        }
        if let Some(left) = descriptors_left()
            && left < DESCRIPTOR_RESERVE
        {
            return Ok(Some(Reply::refused(
                code::LIMIT,
                format!(
                    "the dispatcher has {left} descriptors left and keeps {DESCRIPTOR_RESERVE} \
                     for root and for listing (each waiting attempt holds its lane's): enqueue \
                     again when fewer wait, or have the operator raise its limit of open files \
                     (LimitNOFILE= under systemd)"
                ),
            )));
        }
        Ok(None)
    }

    /// A refusal for a descriptor that cannot be the lane's guard, named by what it is (a
    /// pipe, a directory, a socket), or for a guard whose lock nobody holds: a launcher must
    /// hold the lane it hands over.
    pub(super) fn refuse_descriptor(&self, fd: &OwnedFd, lock: &str) -> Option<Reply> {
        use rustix::fs::FileType;
        let kind = match rustix::fs::fstat(fd) {
            Ok(stat) => FileType::from_raw_mode(stat.st_mode),
            Err(e) => {
                return Some(Reply::refused(
                    code::NOT_THE_LANE,
                    format!("the descriptor sent cannot be examined (fstat: {e})"),
                ));
            }
        };
        if kind != FileType::RegularFile {
            let what = match kind {
                FileType::Fifo => "a pipe (FIFO)",
                FileType::Directory => "a directory",
                FileType::Socket => "a socket",
                FileType::CharacterDevice => "a character device",
                FileType::BlockDevice => "a block device",
                _ => "not a regular file",
            };
            return Some(Reply::refused(
                code::NOT_THE_LANE,
                format!(
                    "the descriptor sent is {what}, not a lane's guard: send the descriptor of \
                     .{lock}.flock on which you hold the lock"
                ),
            ));
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
            return Some(Reply::refused(
                code::NOT_HELD,
                format!(
                    "nobody holds {lock}'s lock, so the descriptor sent does not hold it: take \
                     the lane (flock LOCK_EX on .{lock}.flock, or acquire it as PROTOCOL.md \
                     says) before you enqueue it"
                ),
            ));
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
