#!/usr/bin/env python3
"""The worklane protocol conformance kit: drive an implementation through every case.

Each case (cases/*.json) is a directory state (files, modes, records of live or dead holders,
held guards), one action (take a slot, take a role, STOP, drain, ...) done by the
implementation under test through its adapter, and the expected outcome (admitted, busy,
refused, error; the files present while the slot is held and after its release). Every case
names the PROTOCOL.md section it tests.

    python3 conformance/run.py [--adapter CMD] [--only SUBSTRING] [--list] [-v]

The adapter contract is in conformance/README.md. Linux only (records name real processes
by /proc). Python 3.9 or later, standard library only.
"""

import argparse
import fcntl
import glob
import hashlib
import json
import os
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
        # The records the set-up wrote, by name: an admitted record must be new.
        self.written = {}

    def spawn_live(self):
        child = subprocess.Popen(["sleep", "600"], stdin=subprocess.DEVNULL)
        self.live.append(child)
        return child.pid

    def dead(self):
        child = subprocess.Popen(["sleep", "600"], stdin=subprocess.DEVNULL)
        start = start_of(child.pid)
        child.kill()
        child.wait()
        return child.pid, start

    def end(self):
        for child in self.live:
            child.kill()
            child.wait()


def record(kind, holders, extra, drop=None):
    """A lock record (section 5) for a holder of `kind`:
    live        a live process of this machine (a child of the runner), no `holdsGuard`
    dead        a process of this machine that has exited, no `holdsGuard`
    declared    a process that has exited, `holdsGuard: true` (its guard is free)
    other-host  a live-looking holder on another host
    other-boot  a holder on this host's previous boot
    legacy      no `place` or `identity`
    """
    p = place()
    if kind == "live":
        pid = holders.spawn_live()
        start = start_of(pid)
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


def resolve(value, p):
    """Placeholders in a case's values: `@boot` (this boot's id), `@now`, `@now-N`, `@now+N`
    (milliseconds since the Unix epoch, now and N ms before or after)."""
    if isinstance(value, dict):
        return {k: resolve(v, p) for k, v in value.items()}
    if isinstance(value, list):
        return [resolve(v, p) for v in value]
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


def set_up(d, steps, holders, keep):
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
            rec = record(step.get("holder", "dead"), holders, step.get("extra"), step.get("drop"))
            raw = step.get("raw")
            if raw == "@dup-pid":
                # The record with its pid written twice (the second a live process's).
                body = json.dumps(rec, separators=(",", ":"))
                data = (body[:-1] + f',"pid":{os.getpid()}}}').encode() + b"\n"
            elif raw is not None:
                data = raw.encode()
            else:
                data = json.dumps(rec, separators=(",", ":")).encode() + b"\n"
            write(os.path.join(d, name), data, 0o644)
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
        else:
            raise ValueError(f"unknown setup step {step}")


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
            if rec.get(key) != want:
                problems.append(f"{when}: {name}.{key} is {rec.get(key)!r}, expected {want!r}")


def socket_steps(d, steps, keep, problems):
    """Sends each step's request to the dispatcher's socket (section 14.2) and checks the reply.
    A step: `send` (a JSON object, or `raw` bytes as a string), `fds` (descriptors to pass:
    `{"guard_of": NAME, "held": bool}` the guard of NAME, locked by the runner on that very
    descriptor or opened beside a lock held on another; `{"file": NAME}` any file), and
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
    try:
        set_up(d, case.get("setup", []), holders, keep)
        env = dict(os.environ, CONFORMANCE_DIR=d)
        action = [str(a) for a in case["action"]]
        child = subprocess.Popen(adapter + action, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, env=env, text=True)
        line = _first_line(child)
        words = line.split(" ", 2)
        expect = case["expect"]
        outcome = words[0] if words else ""
        if outcome != expect["outcome"]:
            problems.append(f"outcome {line!r}, expected {expect['outcome']}")
        if outcome == "ok" and "socket" in case:
            socket_steps(d, case["socket"], keep, problems)
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
            check_files(d, case.get("held", {}), "while held", problems)
        for contains in expect.get("says", []):
            if contains not in line:
                problems.append(f"{line!r} does not say {contains!r}")
        try:
            # Closing the adapter's stdin (communicate does) tells it to release.
            rest, err = child.communicate(timeout=ACTION_TIMEOUT)
        except subprocess.TimeoutExpired:
            child.kill()
            rest, err = child.communicate()
            problems.append("the adapter did not end after its stdin closed")
        if outcome == "admitted" and "released" not in rest:
            problems.append(f"no `released` after stdin closed: {rest!r} {err!r}")
        for fd in keep:
            os.close(fd)
        keep.clear()
        check_files(d, case.get("after", {}), "after", problems)
        if "budget_after" in case:
            spec = case["budget_after"]
            key = hashlib.sha256(spec["token"].encode()).hexdigest()[:16]
            try:
                state = json.loads(_read(os.path.join(d, f"github-budget-{key}.json")))
                window = state["resources"][spec["resource"]]
                for field, want in spec.get("window", {}).items():
                    if window.get(field) != want:
                        problems.append(f"after: window {field} is {window.get(field)!r}, expected {want!r}")
            except (OSError, ValueError, KeyError, TypeError) as e:
                problems.append(f"after: no readable budget state: {e!r}")
        if verbose and problems:
            problems.append(f"adapter stderr: {err.strip()!r}")
    except Exception as e:  # a broken case or adapter: reported, the next case runs
        problems.append(f"{type(e).__name__}: {e}")
    finally:
        for fd in keep:
            os.close(fd)
        holders.end()
        subprocess.run(["rm", "-rf", root], check=False)
    return problems


def _first_line(child):
    """The adapter's first line, within the action timeout."""
    import selectors
    sel = selectors.DefaultSelector()
    sel.register(child.stdout, selectors.EVENT_READ)
    if not sel.select(ACTION_TIMEOUT):
        child.kill()
        return "timeout"
    return (child.stdout.readline() or "").strip()


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


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--adapter", help="the adapter command (default: the worklane adapter)")
    ap.add_argument("--only", help="run the cases whose id contains this")
    ap.add_argument("--list", action="store_true", help="list the cases and their sections")
    ap.add_argument("--index", action="store_true",
                    help="print INDEX.md: every case under the PROTOCOL.md section it tests")
    ap.add_argument("--cases", default=os.path.join(HERE, "cases"), help="the directory of case files")
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args()
    adapter = shlex.split(args.adapter) if args.adapter else DEFAULT_ADAPTER
    cases = load_cases(args.only, args.cases)
    if args.index:
        sys.stdout.write(index(cases))
        return 0
    if args.only is None and args.cases == os.path.join(HERE, "cases"):
        with open(os.path.join(HERE, "INDEX.md")) as f:
            if f.read() != index(cases):
                print("conformance/INDEX.md is not the cases' index: regenerate it with "
                      "`python3 conformance/run.py --index > conformance/INDEX.md`")
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
