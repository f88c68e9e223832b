#!/usr/bin/env python3
"""The worklane protocol conformance kit: drive an implementation through every case.

Each case (cases/*.json) is a directory state (files, modes, records of live or dead holders,
held guards), one action (take a slot, take a role, STOP, drain, ...) done by the
implementation under test through its adapter, and the expected outcome (admitted, busy,
refused, error; the files present while the slot is held and after its release). Every case
names the PROTOCOL.md section it tests.

    python3 conformance/run.py [--adapter CMD] [--only SUBSTRING] [--list] [-v]
    python3 conformance/run.py --index > conformance/INDEX.md    # after adding cases
    python3 conformance/run.py --cite                            # PROTOCOL.md's `Cases:` lines

The adapter contract is in conformance/README.md. Linux only (records name real processes
by /proc). Python 3.9 or later, standard library only.
"""

import argparse
import fcntl
import glob
import hashlib
import json
import os
import re
import select
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_ADAPTER = [sys.executable, os.path.join(HERE, "adapters", "worklane.py")]
ACTION_TIMEOUT = 20.0


# --- who a record names -------------------------------------------------------------------

def _read(path):
    with open(path) as f:
        return f.read()


def place():
    """This machine as a record's `place` (PROTOCOL.md section 5)."""
    def ns(kind):
        try:
            return os.stat(f"/proc/self/ns/{kind}").st_ino
        except OSError:
            return None
    return {
        "host": socket.gethostname() if not os.path.exists("/proc/sys/kernel/hostname")
        else _read("/proc/sys/kernel/hostname").strip(),
        "boot": _read("/proc/sys/kernel/random/boot_id").strip(),
        "pidns": ns("pid"),
        "timens": ns("time"),
    }


def start_of(pid):
    """Field 22 of /proc/<pid>/stat, parsed after the last `)`."""
    stat = _read(f"/proc/{pid}/stat")
    return int(stat[stat.rindex(")") + 2:].split()[19])


def now_ms():
    return int(time.time() * 1000)


def rfc3339(ms):
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ms // 1000)) + f".{ms % 1000:03d}Z"


class Holders:
    """The processes records name: live ones (kept until the case ends) and dead ones."""

    def __init__(self):
        self.live = []
        # The live ones by label (`NAME:holder`, `NAME:command`, `NAME:member`), for the
        # `processes` a case checks afterwards.
        self.named = {}
        # The records the set-up wrote, by name: an admitted record must be new.
        self.written = {}

    def spawn_live(self, label=None, **popen):
        child = subprocess.Popen(["sleep", "600"], stdin=subprocess.DEVNULL, **popen)
        self.live.append(child)
        if label:
            self.named[label] = child
        return child.pid

    def dead(self):
        child = subprocess.Popen(["sleep", "600"], stdin=subprocess.DEVNULL)
        start = start_of(child.pid)
        child.kill()
        child.wait()
        return child.pid, start

    def end(self):
        for child in self.live:
            if child.poll() is None:
                child.kill()
            child.wait()


def record(kind, holders, extra, drop=None, label=None):
    """A lock record (section 5) for a holder of `kind`:
    live        a live process of this machine (a child of the runner), no `holdsGuard`
    stopped     a live process of this machine stopped by SIGSTOP (state T), no `holdsGuard`
    dead        a process of this machine that has exited, no `holdsGuard`
    declared    a process that has exited, `holdsGuard: true` (its guard is free)
    other-host  a live-looking holder on another host
    other-boot  a holder on this host's previous boot
    legacy      no `place` or `identity`
    """
    p = place()
    if kind in ("live", "stopped"):
        pid = holders.spawn_live(label)
        start = start_of(pid)
        if kind == "stopped":
            os.kill(pid, signal.SIGSTOP)
            wait_for(lambda: state_of(pid) in ("T", "t"), 5)
    elif kind in ("dead", "declared", "other-boot", "other-host"):
        pid, start = holders.dead()
    elif kind == "legacy":
        pid, start = holders.dead()
    else:
        raise ValueError(f"unknown holder kind {kind!r}")
    rec = {"pid": pid, "owner": f"conformance-{kind}", "acquiredAt": rfc3339(now_ms()), "epoch": 1}
    if kind != "legacy":
        rec["place"] = dict(p)
        rec["identity"] = {"boot": p["boot"], "start": start}
    if kind == "other-host":
        rec["place"]["host"] = p["host"] + "-elsewhere"
    if kind == "other-boot":
        rec["place"]["boot"] = "00000000-0000-4000-8000-000000000000"
        rec["identity"]["boot"] = rec["place"]["boot"]
    if kind == "declared":
        rec["holdsGuard"] = True
    rec.update(extra or {})
    for field in drop or []:
        rec.pop(field, None)
    return resolve(rec, p)


def state_of(pid):
    """The one-letter state of /proc/<pid>/stat, or None when it cannot be read."""
    try:
        stat = _read(f"/proc/{pid}/stat")
    except OSError:
        return None
    return stat[stat.rindex(")") + 2:].split()[0]


def wait_for(test, seconds, every=0.02):
    """Whether `test()` holds within `seconds` (looked at every `every` s)."""
    deadline = time.monotonic() + seconds
    while True:
        if test():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(every)


def command_process(d, name, spec, holders):
    """The `commandProcess` (section 12.7) of a record the set-up writes for NAME: a live
    process the runner starts (`NAME:command`), its `start` as /proc shows it (`"start":
    "wrong"`: another start, so the pid names some other process), and
    - `"group": true`: it leads a process group of its own (so does `"leads_group": true`,
      with `group` recorded as given), with `members` more processes in it (`NAME:member`);
    - `"holds_guard": true`: it holds `.NAME.flock` locked through a descriptor it inherited
      (as a command whose supervisor was SIGKILLed does)."""
    popen = {}
    if spec.get("group") or spec.get("leads_group"):
        popen["preexec_fn"] = os.setpgrp
    guard_fd = None
    if spec.get("holds_guard"):
        g = os.path.join(d, f".{name}.flock")
        if not os.path.exists(g):
            write(g, b"", 0o444)
        guard_fd = os.open(g, os.O_RDONLY | os.O_CLOEXEC)
        fcntl.flock(guard_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        popen["pass_fds"] = (guard_fd,)
    try:
        pid = holders.spawn_live(f"{name}:command", **popen)
    finally:
        if guard_fd is not None:
            os.close(guard_fd)  # the command's copy keeps the lock
    for _ in range(spec.get("members", 0)):
        holders.spawn_live(f"{name}:member", preexec_fn=lambda: os.setpgid(0, pid))
    start = start_of(pid)
    if spec.get("start") == "wrong":
        start += 1
    return {"pid": pid, "start": start, "group": bool(spec.get("group"))}


def resolve(value, p):
    """Placeholders in a case's values: `@boot` (this boot's id), `@now`, `@now-N`, `@now+N`
    (milliseconds since the Unix epoch, now and N ms before or after), and `@uid` anywhere in
    a string (the runner's effective uid, which the adapter's takes run as: `uid:@uid`)."""
    if isinstance(value, dict):
        return {k: resolve(v, p) for k, v in value.items()}
    if isinstance(value, list):
        return [resolve(v, p) for v in value]
    if isinstance(value, str) and "@uid" in value:
        return value.replace("@uid", str(os.geteuid()))
    if isinstance(value, str) and value.startswith("@boot"):
        return p["boot"] + value[len("@boot"):]
    if value in ("@host", "@pidns", "@timens"):
        return p[value[1:]]
    if isinstance(value, str) and value.startswith("@now"):
        rest = value[4:]
        return now_ms() + (int(rest) if rest else 0)
    return value


# --- setting a case up ----------------------------------------------------------------------

def write(path, data, mode):
    with open(path, "wb") as f:
        f.write(data)
    os.chmod(path, mode)


def held_guard(d, name, keep):
    """Publish `.NAME.flock` (empty, 0444) if absent and lock it; kept in `keep`."""
    path = os.path.join(d, f".{name}.flock")
    if not os.path.exists(path):
        write(path, b"", 0o444)
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    keep.append(fd)


def name_of(name):
    """A file name with `@name-now+N` standing for now plus N ms (a line entry's start)."""
    if "@name-now" in name:
        head, rest = name.split("@name-now", 1)
        sign_num, tail = rest.split(".", 1)
        return f"{head}{now_ms() + int(sign_num)}.{tail}"
    return name


def content_of(content):
    """A file's bytes: a string, a JSON value, or a generator: `@64KiB+1` (65 537 bytes),
    `@drain-offset` (a drain flag in force, its `until` written with a +02:00 offset)."""
    if content == "@64KiB+1":
        return b"{" + b" " * 65535 + b"}"
    if isinstance(content, str) and content.startswith("@drain-form:"):
        # A drain in force 10 minutes from now, its `until` written in the given form:
        # lower (t and z), space, micro (6 fraction digits), basic-offset (+0000), null, dup.
        form = content.split(":", 1)[1]
        until = now_ms() + 600_000
        base = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(until // 1000))
        text = {
            "lower": base.replace("T", "t") + "z",
            "space": base.replace("T", " ") + "Z",
            "micro": base + f".{until % 1000:03d}999Z",
            "basic-offset": base + "+0000",
            "no-seconds": base[:-3] + "Z",
        }.get(form)
        if form == "null":
            return b'{"until": null}\n'
        if form == "dup":
            far = rfc3339(now_ms() - 600_000)
            return f'{{"until": "{rfc3339(until)}", "until": "{far}"}}\n'.encode()
        return (json.dumps({"until": text, "to": None}) + "\n").encode()
    if content == "@drain-offset":
        until = now_ms() + 600_000 + 2 * 3600 * 1000
        text = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(until // 1000)) + "+02:00"
        return (json.dumps({"since": rfc3339(now_ms()), "until": text, "to": None}) + "\n").encode()
    if isinstance(content, str):
        return content.encode()
    return json.dumps(content).encode() + b"\n"


def set_up(d, steps, holders, keep, adapter=None, problems=None):
    for step in steps:
        if "file" in step:
            data = content_of(step.get("content", ""))
            path = os.path.join(d, name_of(step["file"]))
            write(path, data, int(step.get("mode", "0644"), 8))
            if "age_s" in step:
                then = time.time() - step["age_s"]
                os.utime(path, (then, then))
            if step.get("locked"):
                fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                keep.append(fd)
        elif "claim_for" in step:
            target = step["claim_for"]
            with open(os.path.join(d, target), "rb") as f:
                digest = hashlib.sha256(f.read()).hexdigest()[:16]
            if step.get("upper"):
                digest = digest.upper()
            rec = record(step.get("holder", "dead"), holders, step.get("extra"))
            data = json.dumps(rec, separators=(",", ":")).encode() + b"\n"
            write(os.path.join(d, f"{target}.{digest}.claim"), data, 0o644)
        elif "record" in step:
            name = name_of(step["record"])
            rec = record(step.get("holder", "dead"), holders, step.get("extra"), step.get("drop"),
                         label=f"{name}:holder")
            if "command_process" in step:
                rec["commandProcess"] = command_process(d, name, step["command_process"], holders)
            raw = step.get("raw")
            if raw == "@dup-pid":
                # The record with its pid written twice (the second a live process's).
                body = json.dumps(rec, separators=(",", ":"))
                data = (body[:-1] + f',"pid":{os.getpid()}}}').encode() + b"\n"
            elif raw is not None:
                data = raw.encode()
            else:
                data = json.dumps(rec, separators=(",", ":")).encode() + b"\n"
            write(os.path.join(d, name), data, int(step.get("mode", "0644"), 8))
            holders.written[name] = data
            if step.get("guard") == "held":
                held_guard(d, name, keep)
            elif step.get("guard", "published") == "published":
                g = os.path.join(d, f".{name}.flock")
                if not os.path.exists(g):
                    write(g, b"", 0o444)
        elif "guard" in step:
            if step.get("held", True):
                held_guard(d, step["guard"], keep)
            else:
                write(os.path.join(d, f".{step['guard']}.flock"), b"", 0o444)
        elif "dir" in step:
            os.mkdir(os.path.join(d, step["dir"]))
        elif "hardlink" in step:
            os.link(os.path.join(d, step["to"]), os.path.join(d, step["hardlink"]))
        elif "symlink" in step:
            os.symlink(step["to"], os.path.join(d, step["symlink"]))
        elif "fifo" in step:
            os.mkfifo(os.path.join(d, step["fifo"]))
        elif "epoch" in step:
            write(os.path.join(d, f"{step['epoch']}.epoch.{step['n']}"), b"", 0o660)
        elif "budget" in step:
            # A credential's budget state (section 13), for the token given: windows with
            # `remaining`, `granted`, `resetAt` (`@now+N`), `pausedUntil`.
            key = hashlib.sha256(step["budget"].encode()).hexdigest()[:16]
            state = resolve(step.get("state", {}), place())
            raw = step.get("raw")
            data = raw.encode() if raw is not None else json.dumps(state).encode() + b"\n"
            write(os.path.join(d, f"github-budget-{key}.json"), data, 0o660)
        elif "stop" in step:
            write(os.path.join(d, "STOP"), (json.dumps(step["stop"]) + "\n").encode(), 0o660)
        elif "drain_ms_ahead" in step:
            until = now_ms() + step["drain_ms_ahead"]
            flag = {"since": rfc3339(now_ms()), "until": rfc3339(until), "to": None}
            write(os.path.join(d, "update-drain.json"), (json.dumps(flag) + "\n").encode(), 0o644)
        elif "signal_holder" in step:
            # While a slot is held: the signal (`KILL`, `TERM`, `STOP`) to the process its
            # record names, only once it is proven to be the adapter's (a descendant of it,
            # with the record's start identity).
            signal_holder(d, step["signal_holder"], step.get("signal", "KILL"), adapter, problems)
        else:
            raise ValueError(f"unknown setup step {step}")


def parent_of(pid):
    try:
        stat = _read(f"/proc/{pid}/stat")
    except OSError:
        return None
    return int(stat[stat.rindex(")") + 2:].split()[1])


def signal_holder(d, name, sig, adapter, problems):
    try:
        rec = json.loads(_read(os.path.join(d, name)))
        pid, start = rec["pid"], rec["identity"]["start"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        problems.append(f"while held: no holder to signal in {name}: {e!r}")
        return
    ancestor, hops = pid, 0
    while ancestor not in (None, 0, 1, adapter) and hops < 64:
        ancestor, hops = parent_of(ancestor), hops + 1
    try:
        same = start_of(pid) == start
    except (OSError, ValueError, IndexError):
        same = False
    if ancestor != adapter or not same:
        problems.append(f"while held: {name} names pid {pid}, which is not a process of the "
                        f"adapter with start {start}: not signalled")
        return
    os.kill(pid, getattr(signal, f"SIG{sig}"))


# --- checking what stands -----------------------------------------------------------------------

def field(rec, key):
    """`(present, value)` of KEY in a record; a dotted KEY reaches into objects."""
    value = rec
    for part in key.split("."):
        if not isinstance(value, dict) or part not in value:
            return False, None
        value = value[part]
    return True, value


WRITTEN_TIME = r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$"


def matches(want, present, got):
    """Whether a field satisfies what a case wants: a value (equal), or a matcher string:
    `@present`, `@absent`, `@int` (a JSON integer), `@string`, `@bool`, `@object`,
    `@written-time` (RFC 3339 as writers write it, `YYYY-MM-DDTHH:MM:SS.mmmZ`, 16.7),
    `@this-place` (this machine's `place`, section 5), `@this-boot`, `@max-bytes:N` and
    `@min-bytes:N` (a string's UTF-8 length), `@ends-with:TEXT`; or a list of matchers, all
    of which must hold."""
    if isinstance(want, list) and want and all(isinstance(w, str) and w.startswith("@") for w in want):
        return all(matches(w, present, got) for w in want)
    if not (isinstance(want, str) and want.startswith("@")):
        return present and got == want
    if want == "@absent":
        return not present
    if not present:
        return False
    if want == "@present":
        return True
    if want == "@int":
        return isinstance(got, int) and not isinstance(got, bool)
    if want == "@string":
        return isinstance(got, str)
    if want == "@bool":
        return isinstance(got, bool)
    if want == "@object":
        return isinstance(got, dict)
    if want == "@written-time":
        return isinstance(got, str) and re.match(WRITTEN_TIME, got) is not None
    if want == "@this-place":
        return got == place()
    if want == "@this-boot":
        return got == place()["boot"]
    kind, _, arg = want.partition(":")
    if kind == "@max-bytes":
        return isinstance(got, str) and len(got.encode()) <= int(arg)
    if kind == "@min-bytes":
        return isinstance(got, str) and len(got.encode()) >= int(arg)
    if kind == "@ends-with":
        return isinstance(got, str) and got.endswith(arg)
    raise ValueError(f"unknown matcher {want!r}")


def guard_id(d, name):
    st = os.stat(os.path.join(d, f".{name}.flock"))
    return st.st_dev, st.st_ino


def guard_free(d, name):
    """Whether nobody holds `.NAME.flock` (a momentary lock of our own tells; let go at once)."""
    fd = os.open(os.path.join(d, f".{name}.flock"), os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(fd)


def running(pid, start):
    """Whether the process PID with that start identity runs (not exited, not a zombie)."""
    try:
        return start_of(pid) == start and state_of(pid) not in (None, "Z", "X")
    except (OSError, ValueError, IndexError):
        return False


def command_of(d, spec, problems, when):
    """The process a held record names as its command (`commandProcess`, 12.7), once it is
    there (looked for within `within_s`): a running process with that start identity, leading
    its process group when `group` is true. Then, as the spec asks: `command_holds_guard` (it
    holds a descriptor of the record's guard, 12.4), `command_env` (variables in its
    environment, `@dir` standing for the slot directory)."""
    name = spec["command_of"]

    def named():
        try:
            cp = json.loads(_read(os.path.join(d, name))).get("commandProcess")
        except (OSError, ValueError):
            return None
        return cp if isinstance(cp, dict) and isinstance(cp.get("pid"), int) else None

    if not wait_for(lambda: named() is not None, spec.get("within_s", 5)):
        problems.append(f"{when}: {name} names no commandProcess")
        return None
    cp = named()
    pid, start = cp["pid"], cp.get("start")
    if not running(pid, start):
        problems.append(f"{when}: {name}'s commandProcess {cp} is not a running process "
                        f"with that start")
        return None
    if cp.get("group") is True:
        try:
            stat = _read(f"/proc/{pid}/stat")
            pgid = int(stat[stat.rindex(")") + 2:].split()[2])
        except (OSError, ValueError):
            pgid = None
        if pgid != pid:
            problems.append(f"{when}: {name}'s command {pid} is said to lead its group, but its "
                            f"group is {pgid}")
    if spec.get("command_holds_guard"):
        want = guard_id(d, name)
        held = []
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                st = os.stat(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            held.append((st.st_dev, st.st_ino))
        if want not in held:
            problems.append(f"{when}: {name}'s command {pid} holds no descriptor of .{name}.flock")
    if "command_env" in spec:
        # A process's environment reads empty while it has no memory of its own (a moment
        # around an exec, or as it exits): read again, briefly, before judging.
        environ = {}
        for _ in range(50):
            try:
                with open(f"/proc/{pid}/environ", "rb") as f:
                    raw = f.read()
            except OSError:
                raw = b""
            environ = dict(v.decode(errors="replace").partition("=")[::2]
                           for v in raw.split(b"\0") if v)
            if environ:
                break
            time.sleep(0.02)
        for var, value in spec["command_env"].items():
            value = value.replace("@dir", d)
            if environ.get(var) != value:
                problems.append(f"{when}: the command's {var} is {environ.get(var)!r}, "
                                f"expected {value!r}")
    return pid, start


def check_processes(d, spec, holders, command, problems, when="after"):
    """The processes the set-up started (by label: `NAME:holder`, `NAME:command`,
    `NAME:member`) are `alive`, `running` (alive and not stopped), `gone`, `terminated`
    (ended by SIGTERM) or `killed` (by SIGKILL), within 5 s; `command` (the held command,
    `held.command_of`) is `gone` (within 5 s) or `alive`; the guards of `free_guards` are
    not held."""
    for label, want in spec.get("processes", {}).items():
        child = holders.named.get(label)
        if child is None:
            problems.append(f"{when}: no process {label} was started")
            continue
        if want == "alive":
            time.sleep(0.2)  # a signal sent a moment ago has ended it by now
            ok = child.poll() is None and state_of(child.pid) not in ("Z", "X")
            seen = "alive" if ok else f"gone ({child.returncode})"
        elif want == "running":
            ok = wait_for(lambda: child.poll() is None and state_of(child.pid) not in
                          ("T", "t", "Z", "X", None), 5)
            seen = f"state {state_of(child.pid)}, returncode {child.returncode}"
        else:
            try:
                child.wait(5)
            except subprocess.TimeoutExpired:
                pass
            code = child.returncode
            ok = {"gone": code is not None, "terminated": code == -signal.SIGTERM,
                  "killed": code == -signal.SIGKILL}[want]
            seen = "still running" if code is None else (
                f"ended by signal {-code}" if code < 0 else f"exited {code}")
        if not ok:
            problems.append(f"{when}: {label} should be {want}: {seen}")
    if "command" in spec:
        if command is None:
            problems.append(f"{when}: no command was seen while held (held.command_of)")
        elif spec["command"] == "gone":
            if not wait_for(lambda: not running(*command), 5):
                problems.append(f"{when}: the held command {command[0]} still runs")
        elif running(*command) != (spec["command"] == "alive"):
            problems.append(f"{when}: the held command {command[0]} should be {spec['command']}")
    for name in spec.get("free_guards", []):
        try:
            if not guard_free(d, name):
                problems.append(f"{when}: .{name}.flock is still held")
        except OSError as e:
            problems.append(f"{when}: .{name}.flock cannot be opened: {e}")


# --- running one case ------------------------------------------------------------------------

def check_files(d, spec, when, problems):
    names = set(os.listdir(d))
    for name in spec.get("exists", []):
        if not glob.fnmatch.filter(names, name):
            problems.append(f"{when}: expected {name} to exist (have {sorted(names)})")
    for name in spec.get("absent", []):
        if glob.fnmatch.filter(names, name):
            problems.append(f"{when}: expected no {name} (have {sorted(names)})")
    for name, fields in spec.get("records", {}).items():
        try:
            rec = json.loads(_read(os.path.join(d, name)))
        except (OSError, ValueError) as e:
            problems.append(f"{when}: {name} is not a readable record: {e}")
            continue
        for key, want in fields.items():
            present, got = field(rec, key)
            if not matches(want, present, got):
                problems.append(f"{when}: {name}.{key} is "
                                f"{repr(got) if present else 'absent'}, expected {want!r}")


def socket_steps(d, steps, keep, problems):
    """Sends each step's request to the dispatcher's socket (section 14.2) and checks the reply.
    A step: `send` (a JSON object, or `raw` bytes as a string), `fds` (descriptors to pass:
    `{"guard_of": NAME, "held": bool}` the guard of NAME, locked by the runner on that very
    descriptor or opened beside a lock held on another (`"free": true`: locked by nobody);
    `{"file": NAME}` any file), and
    `reply`: fields the reply must have (`$N.field` stands for field of step N's reply)."""
    path = os.path.join(d, "dispatcher.sock")
    replies = []
    held_guards = {}

    def subst(value):
        if isinstance(value, dict):
            return {k: subst(v) for k, v in value.items()}
        if isinstance(value, str) and value.startswith("$") and "." in value:
            n, field = value[1:].split(".", 1)
            return replies[int(n)].get(field)
        return value

    for i, step in enumerate(steps):
        fds = []
        for spec in step.get("fds", []):
            if "guard_of" in spec and spec.get("again") and spec["guard_of"] in held_guards:
                # The same open file description, still holding the lock (a launcher that
                # sends its lane twice).
                fd = os.dup(held_guards[spec["guard_of"]])
            elif "guard_of" in spec:
                g = os.path.join(d, f".{spec['guard_of']}.flock")
                if not os.path.exists(g):
                    write(g, b"", 0o444)
                fd = os.open(g, os.O_RDONLY | os.O_CLOEXEC)
                if spec.get("held", True):
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    held_guards[spec["guard_of"]] = fd
                elif spec.get("free"):
                    pass
                else:
                    other = os.open(g, os.O_RDONLY | os.O_CLOEXEC)
                    fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    keep.append(other)
            else:
                target = os.path.join(d, spec["file"])
                if not os.path.exists(target):
                    write(target, b"", 0o644)
                fd = os.open(target, os.O_RDONLY | os.O_CLOEXEC)
            fds.append(fd)
        if step.get("raw", "").startswith("@"):
            line = b'{"op": "list", "pad": "' + b"x" * int(step["raw"][1:]) + b'"}\n'
        elif "raw" in step:
            line = step["raw"].encode()
        else:
            line = json.dumps(subst(step["send"])).encode() + b"\n"
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(ACTION_TIMEOUT)
        try:
            sock.connect(path)
            socket.send_fds(sock, [line], fds)
            data = b""
            while not data.endswith(b"\n"):
                chunk, got, _, _ = socket.recv_fds(sock, 65536, 4)
                for fd in got:
                    os.close(fd)
                if not chunk:
                    break
                data += chunk
        finally:
            sock.close()
            for fd in fds:
                # The runner keeps the lanes it enqueued held (as a launcher hands them over).
                keep.append(fd)
        try:
            reply = json.loads(data)
        except ValueError:
            problems.append(f"step {i}: the reply is not JSON: {data[:200]!r}")
            replies.append({})
            continue
        replies.append(reply)
        for key, want in subst(step.get("reply", {})).items():
            got = reply.get(key)
            if want == "@attempt-id":
                ok = isinstance(got, str) and got.startswith("a-") and len(got) == 34
            elif want == "@present":
                ok = got is not None
            else:
                ok = got == want
            if not ok:
                problems.append(f"step {i} ({step.get('send', step.get('raw', ''))!s:.80}): "
                                f"{key} is {got!r}, expected {want!r} (reply {reply})")
        if "attempts" in step:
            have = len(reply.get("attempts") or [])
            if have != step["attempts"]:
                problems.append(f"step {i}: {have} attempts listed, expected {step['attempts']}")


def run_case(case, adapter, verbose):
    root = tempfile.mkdtemp(prefix="worklane-conformance-")
    d = os.path.join(root, "slots")
    os.mkdir(d, 0o2770)
    holders, keep, problems = Holders(), [], []
    child = None
    try:
        set_up(d, case.get("setup", []), holders, keep)
        env = dict(os.environ, CONFORMANCE_DIR=d)
        env.update({k: v.replace("@dir", d) for k, v in case.get("env", {}).items()})
        action = [str(a) for a in case["action"]]
        child = subprocess.Popen(adapter + action, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, env=env)
        out = Output(child)
        line = out.line(ACTION_TIMEOUT)
        if line is None:
            child.kill()
            line = "timeout"
        words = line.split(" ", 2)
        expect = case["expect"]
        outcome = words[0] if words else ""
        if outcome != expect["outcome"]:
            problems.append(f"outcome {line!r}, expected {expect['outcome']}")
        if outcome == "ok" and "socket" in case:
            socket_steps(d, case["socket"], keep, problems)
        command = None
        if outcome == "admitted":
            if "name" in expect and (len(words) < 2 or words[1] != expect["name"]):
                problems.append(f"admitted {words[1:2]}, expected {expect['name']}")
            if "epoch" in expect and (len(words) < 3 or words[2] != str(expect["epoch"])):
                problems.append(f"epoch {words[2:3]}, expected {expect['epoch']}")
            # Whatever the case, what was admitted stands in the directory: its record, with
            # the epoch reported (section 9), and its guard (section 3).
            if len(words) >= 3:
                try:
                    held = json.loads(_read(os.path.join(d, words[1])))
                    if str(held.get("epoch")) != words[2]:
                        problems.append(f"{words[1]} records epoch {held.get('epoch')}, reported {words[2]}")
                    with open(os.path.join(d, words[1]), "rb") as f:
                        if f.read() == holders.written.get(words[1]):
                            problems.append(f"{words[1]} is still the set-up's record")
                except (OSError, ValueError) as e:
                    problems.append(f"admitted {words[1]}, but its record is not there: {e}")
                if not os.path.isfile(os.path.join(d, f".{words[1]}.flock")):
                    problems.append(f"admitted {words[1]} without its guard .{words[1]}.flock")
            else:
                problems.append(f"`admitted` needs NAME and EPOCH: {line!r}")
            spec = case.get("held", {})
            if "command_of" in spec:
                command = command_of(d, spec, problems, "while held")
            # A record that changes while held (`commandProcess` once the command runs) is
            # looked at again for `within_s` seconds.
            deadline = time.monotonic() + spec.get("within_s", 0)
            while True:
                held_problems = []
                check_files(d, spec, "while held", held_problems)
                if not held_problems or time.monotonic() >= deadline:
                    break
                time.sleep(0.05)
            problems.extend(held_problems)
            if "while_held" in case:
                while_held(d, case["while_held"], holders, keep, child, out, command, problems)
        for contains in expect.get("says", []):
            if contains not in line:
                problems.append(f"{line!r} does not say {contains!r}")
        # Closing the adapter's stdin tells it to release.
        rest, err, ended = out.finish(ACTION_TIMEOUT)
        if not ended:
            problems.append("the adapter did not end after its stdin closed")
        if outcome == "admitted" and "released" not in rest:
            problems.append(f"no `released` after stdin closed: {rest!r} {err!r}")
        for fd in keep:
            os.close(fd)
        keep.clear()
        check_files(d, case.get("after", {}), "after", problems)
        check_processes(d, case.get("after", {}), holders, command, problems, "after")
        if "budget_after" in case:
            spec = case["budget_after"]
            key = hashlib.sha256(spec["token"].encode()).hexdigest()[:16]
            try:
                state = json.loads(_read(os.path.join(d, f"github-budget-{key}.json")))
                window = state["resources"][spec["resource"]]
                for name, want in spec.get("window", {}).items():
                    if window.get(name) != want:
                        problems.append(f"after: window {name} is {window.get(name)!r}, expected {want!r}")
            except (OSError, ValueError, KeyError, TypeError) as e:
                problems.append(f"after: no readable budget state: {e!r}")
        if verbose and problems:
            problems.append(f"adapter stderr: {err.strip()!r}")
    except Exception as e:  # a broken case or adapter: reported, the next case runs
        problems.append(f"{type(e).__name__}: {e}")
    finally:
        if child is not None and child.poll() is None:
            child.kill()
            child.wait()
        for fd in keep:
            os.close(fd)
        holders.end()
        subprocess.run(["rm", "-rf", root], check=False)
    return problems


def while_held(d, spec, holders, keep, child, out, command, problems):
    """While the slot is held: the set-up steps of `steps` (a STOP, a drain flag, a signal to
    the holder), then either the adapter says `halted` within `within_s` seconds (`"halted":
    true`, its line saying each of `says`), or it keeps holding for `within_s` seconds
    (`"halted": false`). Then, before the runner closes the adapter's stdin, the state of
    `then` (as `after` checks it)."""
    set_up(d, spec.get("steps", []), holders, keep, adapter=child.pid, problems=problems)
    within = spec.get("within_s", 10)
    line = out.line(within)
    when = "halted" if spec.get("halted") else "still held"
    if spec.get("halted"):
        if line is None or not line.startswith("halted"):
            problems.append(f"while held: expected `halted` within {within} s, got {line!r}")
            return
        for contains in spec.get("says", []):
            if contains not in line:
                problems.append(f"while held: {line!r} does not say {contains!r}")
    elif line is not None:
        problems.append(f"while held: expected the slot held for {within} s, got {line!r}")
    check_files(d, spec.get("then", {}), when, problems)
    check_processes(d, spec.get("then", {}), holders, command, problems, when)


class Output:
    """The adapter's standard output, line by line within a time limit (read from the
    descriptor itself, so that no line waits in a buffer a select cannot see)."""

    def __init__(self, child):
        self.child, self.buffer, self.eof = child, b"", False

    def line(self, timeout):
        """The next line, stripped; None if none came within `timeout` seconds."""
        deadline = time.monotonic() + timeout
        fd = self.child.stdout.fileno()
        while b"\n" not in self.buffer and not self.eof:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                return None
            chunk = os.read(fd, 65536)
            self.eof = not chunk
            self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\n")
        return line.decode(errors="replace").strip()

    def finish(self, timeout):
        """Closes the adapter's stdin, reads the rest of its output and its stderr until it
        ends: `(rest, stderr, ended within timeout)`."""
        try:
            self.child.stdin.close()
        except OSError:
            pass
        out, err = self.child.stdout.fileno(), self.child.stderr.fileno()
        got = {out: self.buffer, err: b""}
        open_fds = [err] if self.eof else [out, err]
        deadline = time.monotonic() + timeout
        while open_fds:
            left = deadline - time.monotonic()
            ready = select.select(open_fds, [], [], left)[0] if left > 0 else []
            if not ready:
                self.child.kill()
                break
            for fd in ready:
                chunk = os.read(fd, 65536)
                if chunk:
                    got[fd] += chunk
                else:
                    open_fds.remove(fd)
        ended = not open_fds
        self.child.wait()
        return got[out].decode(errors="replace"), got[err].decode(errors="replace"), ended


def load_cases(only, where):
    cases = []
    for path in sorted(glob.glob(os.path.join(where, "*.json"))):
        with open(path) as f:
            for case in json.load(f):
                case["file"] = os.path.basename(path)
                if only is None or only in case["id"]:
                    cases.append(case)
    ids = [c["id"] for c in cases]
    dup = {i for i in ids if ids.count(i) > 1}
    if dup:
        raise SystemExit(f"duplicate case ids: {sorted(dup)}")
    return cases


def section_key(section):
    return [int(p) if p.isdigit() else p for p in section.split(".")]


def index(cases):
    """INDEX.md: for each PROTOCOL.md section, the cases that test it."""
    out = ["# Conformance cases by PROTOCOL.md section", "",
           "Generated by `python3 conformance/run.py --index > conformance/INDEX.md`; the runner",
           "refuses to run the whole kit while this file is not the cases' index.", ""]
    for section in sorted({c["section"] for c in cases}, key=section_key):
        out.append(f"## Section {section}")
        out.append("")
        for c in cases:
            if c["section"] == section:
                out.append(f"- `{c['id']}` ({c['file']}): {c['title']}")
        out.append("")
    return "\n".join(out)


# --- PROTOCOL.md's citations of the cases -------------------------------------------------------

PROTOCOL = os.path.join(os.path.dirname(HERE), "PROTOCOL.md")
HEADING = re.compile(r"^(##|###) (\d+(?:\.\d+)?)\.? ")
CITATION_WIDTH = 95


def protocol_sections(lines):
    """PROTOCOL.md's numbered sections, in order: `(number, heading line index, end index,
    has subsections)`, a section's body being the lines after its heading up to the next
    heading of either level (so a section with subsections has only its introduction).
    Headings inside code fences are not headings."""
    heads, fenced = [], False
    for i, line in enumerate(lines):
        if line.startswith("```"):
            fenced = not fenced
        m = None if fenced else HEADING.match(line)
        if m:
            heads.append((m.group(2), i, len(m.group(1))))
        elif not fenced and line.startswith("#"):
            heads.append((None, i, 0))
    sections = []
    for k, (number, at, level) in enumerate(heads):
        if number is None:
            continue
        end = heads[k + 1][1] if k + 1 < len(heads) else len(lines)
        parent = level == 2 and any(n and n.startswith(number + ".") for n, _, _ in heads)
        sections.append((number, at, end, parent))
    return sections


def citation_at(lines, start, end):
    """The `Cases:` paragraph in lines[start:end]: `(first, last + 1, text)` or None."""
    for i in range(start, end):
        if lines[i].startswith("Cases:"):
            j = i + 1
            while j < end and lines[j].strip() and not lines[j].startswith("#"):
                j += 1
            return i, j, " ".join(line.strip() for line in lines[i:j])
    return None


def citation(ids):
    """The `Cases:` paragraph citing IDS, wrapped as the rest of PROTOCOL.md is."""
    out, line = [], "Cases:"
    for k, case_id in enumerate(ids):
        word = f"`{case_id}`" + ("," if k + 1 < len(ids) else ".")
        if len(line) + 1 + len(word) > CITATION_WIDTH:
            out.append(line)
            line = word
        else:
            line += " " + word
    out.append(line)
    return out


def citation_problems(cases, text):
    """Why PROTOCOL.md's citations are not the cases': each section that cases name must end
    its text with the `Cases:` paragraph citing exactly them, in the kit's order (as `--cite`
    writes it); a section without subsections that no case names must say `Cases: none`, with
    why (it may point to other sections' cases, which must exist); no other section may cite
    an id that is not one of its cases."""
    lines = text.split("\n")
    sections = protocol_sections(lines)
    numbers = {number for number, _, _, _ in sections}
    by_section = {}
    for c in cases:
        by_section.setdefault(c["section"], []).append(c["id"])
    problems = [f"case {i} names section {s}, which PROTOCOL.md does not have"
                for s, ids in by_section.items() if s not in numbers for i in ids]
    known = {c["id"]: c["section"] for c in cases}
    for number, at, end, parent in sections:
        found = citation_at(lines, at + 1, end)
        want = by_section.get(number, [])
        if found is None:
            if want:
                problems.append(f"section {number} cites none of its {len(want)} cases")
            elif not parent:
                problems.append(f"section {number} has no `Cases:` line (`Cases: none`, and "
                                f"why, when no case tests it)")
            continue
        # A case id is a section number, `-`, then words; other code in a `Cases: none` line
        # (a path, a command) is not a citation.
        cited = [w for w in re.findall(r"`([^`]+)`", found[2]) if re.match(r"^\d+(\.\d+)*-\S+$", w)]
        none = found[2].startswith("Cases: none")
        for case_id in cited:
            if case_id not in known:
                problems.append(f"section {number} cites `{case_id}`, which is no case")
            elif known[case_id] != number and not none:
                problems.append(f"section {number} cites `{case_id}`, a case of section "
                                f"{known[case_id]}")
        missing = [i for i in want if i not in cited]
        if missing:
            problems.append(f"section {number} does not cite its cases {', '.join(missing)}")
        elif want and [i for i in cited if i in want] != want:
            problems.append(f"section {number} cites its cases out of the kit's order, or one "
                            f"twice (`--cite` writes them in order)")
        if not want and not found[2].startswith("Cases: none"):
            problems.append(f"section {number}: no case tests it, so its line is `Cases: none`")
    return problems


def cite(cases, text):
    """PROTOCOL.md with every section's `Cases:` paragraph written from the cases: replaced
    where it stands, else added at the end of the section's text (`Cases: none in the kit.`
    for a section without subsections that no case names; say why by hand)."""
    lines = text.split("\n")
    by_section = {}
    for c in cases:
        by_section.setdefault(c["section"], []).append(c["id"])
    # From the end, so that earlier line numbers hold.
    for number, at, end, parent in reversed(protocol_sections(lines)):
        found = citation_at(lines, at + 1, end)
        want = by_section.get(number)
        if want:
            new = citation(want)
        elif found is not None and found[2].startswith("Cases: none"):
            continue
        elif parent:
            continue
        else:
            new = ["Cases: none in the kit."]
        if found is not None:
            lines[found[0]:found[1]] = new
            continue
        last = end
        while last > at + 1 and not lines[last - 1].strip():
            last -= 1
        lines[last:last] = [""] + new
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--adapter", help="the adapter command (default: the worklane adapter)")
    ap.add_argument("--only", help="run the cases whose id contains this")
    ap.add_argument("--list", action="store_true", help="list the cases and their sections")
    ap.add_argument("--index", action="store_true",
                    help="print INDEX.md: every case under the PROTOCOL.md section it tests")
    ap.add_argument("--check-citations", action="store_true",
                    help="check that PROTOCOL.md cites, under each section, exactly the cases "
                         "that test it (its `Cases:` lines), and run nothing")
    ap.add_argument("--cite", action="store_true",
                    help="rewrite PROTOCOL.md's `Cases:` lines from the cases (after adding cases)")
    ap.add_argument("--cases", default=os.path.join(HERE, "cases"), help="the directory of case files")
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args()
    adapter = shlex.split(args.adapter) if args.adapter else DEFAULT_ADAPTER
    cases = load_cases(args.only, args.cases)
    if args.index:
        sys.stdout.write(index(cases))
        return 0
    if args.cite or args.check_citations:
        every = load_cases(None, args.cases)
        with open(PROTOCOL) as f:
            text = f.read()
        if args.cite:
            with open(PROTOCOL, "w") as f:
                f.write(cite(every, text))
            return 0
        problems = citation_problems(every, text)
        for p in problems:
            print(f"PROTOCOL.md: {p}")
        print(f"PROTOCOL.md cites {len(every)} cases under their sections" if not problems else
              "regenerate the citations with `python3 conformance/run.py --cite`")
        return 1 if problems else 0
    if args.only is None and args.cases == os.path.join(HERE, "cases"):
        with open(os.path.join(HERE, "INDEX.md")) as f:
            if f.read() != index(cases):
                print("conformance/INDEX.md is not the cases' index: regenerate it with "
                      "`python3 conformance/run.py --index > conformance/INDEX.md`")
                return 1
        # A copy of the kit without PROTOCOL.md beside it (a harness author's) runs all the
        # same; in worklane's tree the citations must be the cases'.
        if os.path.exists(PROTOCOL):
            with open(PROTOCOL) as f:
                problems = citation_problems(cases, f.read())
            if problems:
                for p in problems:
                    print(f"PROTOCOL.md: {p}")
                print("PROTOCOL.md does not cite the cases: regenerate its citations with "
                      "`python3 conformance/run.py --cite`")
                return 1
    if args.list:
        for c in cases:
            print(f"{c['section']:>6}  {c['id']}  {c['title']}")
        print(f"{len(cases)} cases")
        return 0
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    failed = 0
    for c in cases:
        problems = run_case(c, adapter, args.verbose)
        status = "ok" if not problems else "FAIL"
        print(f"{status:4}  {c['section']:>6}  {c['id']}")
        for p in problems:
            print(f"        {p}")
        failed += bool(problems)
    print(f"{len(cases) - failed} of {len(cases)} cases passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
