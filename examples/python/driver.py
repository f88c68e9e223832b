#!/usr/bin/env python3
"""A driver in another language: claims the attempt the dispatcher started it for, takes the
lane and the slot from the received descriptors, and runs COMMAND holding both (PROTOCOL.md
sections 3 and 14.3). Standard library only.

    driver.py SLOT_DIR COMMAND...   (with WORKLANE_ATTEMPT, WORKLANE_TOKEN, WORKLANE_SOCKET)
"""

import fcntl
import os
import subprocess
import sys

import worklane_proto as wl


def adopt(dirfd, name, fd, attempt):
    """Re-assert the lock on the received descriptor, check it is the guard at the name, and
    rewrite the record to name us, keeping the epoch."""
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    st = os.fstat(fd)
    if wl.guard_id(dirfd, name) != (st.st_dev, st.st_ino):
        raise SystemExit(f"{name}: the received descriptor is not its guard")
    data = wl.record("python driver", wl.current_epoch(dirfd, name), attempt=attempt)
    wl.replace(dirfd, name, data)
    return data


def main():
    slot_dir, *command = sys.argv[1:]
    attempt = os.environ["WORKLANE_ATTEMPT"]
    reply, fds = wl.ask(os.environ["WORKLANE_SOCKET"],
                        {"version": 1, "op": "claim", "attempt": attempt, "token": os.environ["WORKLANE_TOKEN"]})
    if not reply["ok"] or len(fds) != 2:
        for fd in fds:
            os.close(fd)
        print(f"claim refused: {reply.get('message')}", file=sys.stderr)
        return 75
    dirfd = os.open(slot_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    records = [(name, fd, adopt(dirfd, name, fd, attempt))
               for name, fd in ((reply["lane"], fds[0]), (reply["slot"], fds[1]))]
    # The command inherits both guards: they stay held while any process of it lives.
    status = subprocess.run(command, pass_fds=fds).returncode
    for name, fd, data in records:
        with open(os.open(name, os.O_RDONLY | os.O_NOFOLLOW, dir_fd=dirfd), "rb") as f:
            if f.read() == data:
                os.unlink(name, dir_fd=dirfd)
        os.close(fd)
    return status


if __name__ == "__main__":
    sys.exit(main())
