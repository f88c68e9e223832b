#!/usr/bin/env python3
"""A launcher in another language: takes a lane's lock and hands it, held, to the worklane
dispatcher with its row (PROTOCOL.md sections 3, 7, 9 and 14). Standard library only.

    launcher.py SLOT_DIR LANE PRIORITY DRIVER...

Prints the attempt id; exit 75 if the lane is taken, 69 if no dispatcher answers.
"""

import os
import sys
import time

import worklane_proto as wl


def main():
    slot_dir, lane, priority, *driver = sys.argv[1:]
    lock = f"lane-{lane}.lock"
    dirfd = os.open(slot_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    guard = wl.take_guard(dirfd, lock)
    if guard is None:
        print(f"lane {lane} is taken", file=sys.stderr)
        return 75
    try:
        os.stat(lock, dir_fd=dirfd, follow_symlinks=False)
        print(f"lane {lane} has a record: taking it over is section 8's job", file=sys.stderr)
        return 75
    except FileNotFoundError:
        pass
    epoch = wl.advance_epoch(dirfd, lock)
    if not wl.publish(dirfd, lock, wl.record("python launcher", epoch, lane=lane)):
        return 75
    env = {k: v for k, v in os.environ.items() if k.startswith(("LANE_", "WORKLANE_"))}
    request = {"version": 1, "op": "enqueue", "lane": lane, "start_ms": int(time.time() * 1000),
               "priority": int(priority), "args": driver, "env": env, "stage": "example"}
    try:
        reply, _ = wl.ask(os.path.join(slot_dir, "dispatcher.sock"), request, [guard])
    except OSError as e:
        print(f"no dispatcher answers: {e}", file=sys.stderr)
        os.unlink(lock, dir_fd=dirfd)
        return 69
    if not reply["ok"]:
        print(f"refused: {reply['error']}: {reply['message']}", file=sys.stderr)
        os.unlink(lock, dir_fd=dirfd)
        return 75
    # The dispatcher's copy holds the lane now; ours closes, the record stays.
    os.close(guard)
    print(reply["attempt"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
