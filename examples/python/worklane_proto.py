"""The parts of the worklane protocol (PROTOCOL.md) a launcher and a driver need, standard
library only: place and identity, guards, records, the dispatcher socket."""

import fcntl
import json
import os
import secrets
import socket
import time

RECORD_MODE = 0o644


def place():
    """`place` of PROTOCOL.md section 5 (Linux)."""
    def ns(name):
        try:
            return os.stat(f"/proc/self/ns/{name}").st_ino
        except FileNotFoundError:
            return None
    with open("/proc/sys/kernel/random/boot_id") as f:
        boot = f.read().strip()
    return {"host": os.uname().nodename, "boot": boot, "pidns": ns("pid"), "timens": ns("time")}


def start_of(pid):
    """Field 22 of /proc/<pid>/stat, counted after the last ')'."""
    with open(f"/proc/{pid}/stat", "rb") as f:
        stat = f.read()
    return int(stat[stat.rindex(b")") + 2:].split()[19])


def now_rfc3339():
    ms = int(time.time() * 1000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ms // 1000)) + f".{ms % 1000:03d}Z"


def record(owner, epoch, **extra):
    """Our lock record: we keep the guard for its whole life (holdsGuard)."""
    p = place()
    body = {"pid": os.getpid(), "owner": owner, "acquiredAt": now_rfc3339(), "place": p,
            "identity": {"boot": p["boot"], "start": start_of(os.getpid())},
            "epoch": epoch, "holdsGuard": True}
    body.update(extra)
    return (json.dumps(body, separators=(",", ":")) + "\n").encode()


def _temp(dirfd, name, data, mode):
    """Section 4: a temp file created exclusively, locked, given its mode, written."""
    while True:
        temp = f".{name}.tmp-{secrets.token_hex(8)}"
        try:
            fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                         0o600, dir_fd=dirfd)
            break
        except FileExistsError:
            continue
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    os.fchmod(fd, mode)
    os.write(fd, data)
    return temp, fd


def publish(dirfd, name, data, mode=RECORD_MODE):
    """Section 4: publish by exclusive link; False if the name is taken."""
    temp, fd = _temp(dirfd, name, data, mode)
    try:
        os.link(temp, name, src_dir_fd=dirfd, dst_dir_fd=dirfd)
        return True
    except FileExistsError:
        return False
    finally:
        os.unlink(temp, dir_fd=dirfd)
        os.close(fd)


def replace(dirfd, name, data, mode=RECORD_MODE):
    """Section 4: replace whole by rename."""
    temp, fd = _temp(dirfd, name, data, mode)
    os.rename(temp, name, src_dir_fd=dirfd, dst_dir_fd=dirfd)
    os.close(fd)


def guard_id(dirfd, resource):
    st = os.stat(f".{resource}.flock", dir_fd=dirfd, follow_symlinks=False)
    return (st.st_dev, st.st_ino)


def take_guard(dirfd, resource):
    """Section 3: publish the guard if missing, open it safely, lock it, check the name."""
    name = f".{resource}.flock"
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dirfd)
    except FileNotFoundError:
        temp = f"{name}.tmp-{secrets.token_hex(8)}"
        tfd = os.open(temp, os.O_RDONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                      0o400, dir_fd=dirfd)
        os.fchmod(tfd, 0o444)
        os.close(tfd)
        try:
            os.link(temp, name, src_dir_fd=dirfd, dst_dir_fd=dirfd)
        except FileExistsError:
            pass
        os.unlink(temp, dir_fd=dirfd)
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dirfd)
    st = os.fstat(fd)
    assert st.st_size == 0 and fd > 2, "a guard is an empty file above the standard streams"
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    if guard_id(dirfd, resource) != (st.st_dev, st.st_ino):
        os.close(fd)
        return None
    return fd


def advance_epoch(dirfd, lock):
    """Section 9: rename the largest F.epoch.N to N+1, or publish F.epoch.1."""
    prefix = f"{lock}.epoch."
    found = [int(n[len(prefix):]) for n in os.listdir(dirfd)
             if n.startswith(prefix) and n[len(prefix):].isdigit()
             and not (len(n) > len(prefix) + 1 and n[len(prefix)] == "0")]
    if not found:
        publish(dirfd, f"{prefix}1", b"", 0o660)
        return 1
    n = max(found)
    os.rename(f"{prefix}{n}", f"{prefix}{n + 1}", src_dir_fd=dirfd, dst_dir_fd=dirfd)
    return n + 1


def current_epoch(dirfd, lock):
    prefix = f"{lock}.epoch."
    found = [int(n[len(prefix):]) for n in os.listdir(dirfd)
             if n.startswith(prefix) and n[len(prefix):].isdigit()]
    return max(found, default=0)


def ask(path, request, fds=()):
    """Section 14.2: one request and one reply per connection, one JSON line each."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.connect(path)
        socket.send_fds(s, [json.dumps(request).encode() + b"\n"], list(fds))
        data, got, _, _ = socket.recv_fds(s, 65536, 4, socket.MSG_CMSG_CLOEXEC)
        while not data.endswith(b"\n"):
            more = s.recv(65536)
            if not more:
                break
            data += more
        return json.loads(data), got
