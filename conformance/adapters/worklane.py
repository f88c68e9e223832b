#!/usr/bin/env python3
"""The conformance adapter for worklane itself: each action through the `worklane` CLI.

The binary is $WORKLANE (default: `worklane` on PATH); the slot directory is
$CONFORMANCE_DIR, given to worklane as AGENT_SLOTS_DIR. See conformance/README.md for the
contract every adapter follows.
"""

import json
import os
import shutil
import subprocess
import sys

WORKLANE = os.environ.get("WORKLANE", "worklane")


def say(line):
    print(line, flush=True)


def env():
    slots = os.environ["CONFORMANCE_DIR"]
    # The dispatcher's private state (its queue database): beside the slot directory, never
    # the machine's own /var/lib/worklane.
    state = os.path.join(os.path.dirname(slots), os.path.basename(slots) + ".dispatcher-state")
    e = dict(os.environ, AGENT_SLOTS_DIR=slots, WORKLANE_STATE_DIR=state)
    e.pop("AGENT_SLOTS_CONFIG", None)
    e.pop("WORKLANE_FLEET", None)
    return e


def hold(argv, command=("cat",)):
    """Runs `worklane ARGV --status-fd N -- COMMAND`: the command (`cat` by default) holds the
    slot until our stdin closes; STOP or the supervisor's death ends it sooner (`halted`)."""
    read_end, write_end = os.pipe()
    child = subprocess.Popen(
        [WORKLANE] + argv + ["--status-fd", str(write_end), "--"] + list(command),
        stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        pass_fds=(write_end,), env=env(),
    )
    os.close(write_end)
    events = Lines(read_end)
    while True:
        event = events.next_event()
        if event is None:
            break
        kind = event.get("event")
        if kind == "taken":
            say(f"admitted {event['slot']} {event['epoch']}")
            held(child, events)
            return
        if kind == "refused":
            child.wait()
            word = "refused" if event.get("exit") == 69 else "busy"
            say(f"{word} {event.get('message', '')}")
            return
        if kind == "error":
            child.wait()
            say(f"error {event.get('message', '')}")
            return
    child.wait()
    say(f"error worklane exited {child.returncode} without a status: {child.stderr.read().strip()}")


class Lines:
    """worklane's --status-fd events, read from the raw descriptor (no read-ahead buffer, so
    a select on it tells the truth)."""

    def __init__(self, fd):
        self.fd, self.buffer = fd, b""

    def next_event(self):
        """The next event, blocking; None at the end."""
        while b"\n" not in self.buffer:
            chunk = os.read(self.fd, 4096)
            if not chunk:
                return None
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return json.loads(line)


def held(child, events):
    """While worklane holds the slot: our stdin closing releases it (closing the command's
    stdin ends `cat`): `released`. worklane ending first (STOP halted the command, or worklane
    itself was killed) is `halted WHY`; the command's stdin stays open until ours closes (so
    that whatever ended the command, it was not us), then `released`."""
    import selectors
    sel = selectors.DefaultSelector()
    sel.register(sys.stdin.fileno(), selectors.EVENT_READ, "stdin")
    sel.register(events.fd, selectors.EVENT_READ, "events")
    while True:
        for key, _ in sel.select():
            if key.data == "stdin":
                if os.read(sys.stdin.fileno(), 4096):
                    continue
                child.stdin.close()
                child.wait()
                say("released")
                return
            # worklane wrote an event, or ended (the descriptor closes with it).
            event = events.next_event()
            if event is not None and event.get("event") != "end":
                continue
            child.wait()
            why = (event or {}).get("halted_by")
            if event is None:
                why = f"worklane ended without its last event (exit {child.returncode})"
            if why is not None:
                say(f"halted {why}")
                sys.stdin.read()
                child.stdin.close()
            say("released")
            return


def serve():
    """Starts the dispatcher on the slot directory's socket; `ok` once it answers; stopped
    (SIGTERM) when our stdin closes."""
    import socket
    import time
    path = os.path.join(os.environ["CONFORMANCE_DIR"], "dispatcher.sock")
    child = subprocess.Popen([WORKLANE, "dispatcher"], stdin=subprocess.DEVNULL,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env())
    deadline = time.time() + 15
    while time.time() < deadline:
        if child.poll() is not None:
            say(f"error the dispatcher exited {child.returncode}: {child.stderr.read().strip()}")
            return
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
                probe.connect(path)
                probe.sendall(b'{"op": "list"}\n')
                probe.recv(65536)
            break
        except OSError:
            time.sleep(0.02)
    say("ok")
    sys.stdin.read()
    child.terminate()
    child.wait()
    say("released")


def budget_take(token, resource, consumer):
    """Takes one call of RESOURCE from TOKEN's budget without waiting: `ok counted LEFT`,
    `ok uncounted`, or `busy WHY` (spent or paused)."""
    e = env()
    e["CONFORMANCE_TOKEN"] = token
    done = subprocess.run(
        [WORKLANE, "budget", "take", "--token-env", "CONFORMANCE_TOKEN", "--resource", resource,
         "--consumer", consumer, "--wait-max", "0", "--json"],
        env=e, capture_output=True, text=True)
    try:
        answer = json.loads(done.stdout)
    except ValueError:
        say(f"error {done.returncode} {done.stderr.strip()}")
        return
    if answer.get("go"):
        say(f"ok counted {answer.get('left')}" if answer.get("counted") else "ok uncounted")
    else:
        say(f"busy {answer.get('kind')} {answer.get('message', '')}")


def take(kind, options):
    """`take KIND [limit=MS] [arg=WORD]...`: `--limit` for a test run; each WORD one more
    argument of the held command, which becomes `sh -c 'exec cat' sh WORD...` (still `cat`)."""
    argv, words = ["run", "-n", "--kind", kind], []
    for option in options:
        key, _, value = option.partition("=")
        if key == "limit":
            argv += ["--limit", f"{value}ms"]
        elif key == "arg":
            words.append(value)
        else:
            say(f"unsupported take option {option}")
            return
    hold(argv, ["sh", "-c", "exec cat", "sh"] + words if words else ["cat"])


def lease_holder():
    """worklane-lease's helper program `lease-holder` (built with the crate's `test-seams`
    feature): $WORKLANE_LEASE_HOLDER, else beside the worklane binary, else on PATH."""
    given = os.environ.get("WORKLANE_LEASE_HOLDER")
    if given:
        return given
    beside = os.path.join(os.path.dirname(shutil.which(WORKLANE) or WORKLANE), "lease-holder")
    return beside if os.path.isfile(beside) else "lease-holder"


def lock(name):
    """`lock NAME`: the library's own acquire (`worklane_lease::acquire`, process liveness) of
    NAME exactly as given, through `lease-holder DIR NAME OWNER`; its name check is section 2's.
    It answers `held EPOCH PID`, `refused WHY`, or `error: name CLASS: WHY` (CLASS from the
    typed error); held, it releases when its stdin closes."""
    try:
        child = subprocess.Popen(
            [lease_holder(), os.environ["CONFORMANCE_DIR"], name, "conformance"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            env=env(), text=True)
    except OSError as e:
        say(f"unsupported lock (no lease-holder: build it with `cargo build -p worklane-lease "
            f"--features test-seams --bin lease-holder`: {e})")
        return
    line = child.stdout.readline().strip()
    word, _, rest = line.partition(" ")
    if word == "held":
        say(f"admitted {name} {rest.split()[0]}")
        sys.stdin.read()
        child.stdin.close()
        child.wait()
        say("released")
        return
    child.stdin.close()
    child.wait()
    if word == "refused":
        say(f"busy {rest}")
    elif line.startswith("error: name "):
        say(f"error name {line[len('error: name '):]}")
    else:
        say(f"error {line} {child.stderr.read().strip()}")


def simple(argv):
    done = subprocess.run([WORKLANE] + argv, env=env(), capture_output=True, text=True)
    if done.returncode == 0:
        say("ok")
    else:
        say(f"error {done.returncode} {done.stderr.strip()}")


def main():
    action, args = sys.argv[1], sys.argv[2:]
    if action == "take":
        take(args[0], args[1:])
    elif action == "lock":
        lock(args[0])
    elif action == "role":
        hold(["lease", "run", "--role", args[0], "--ttl", f"{args[1]}ms"])
    elif action == "stop":
        simple(["stop-all"] + args)
    elif action == "resume":
        simple(["resume-all"])
    elif action == "drain":
        simple(["drain", "--until", f"{args[0]}s"])
    elif action == "undrain":
        simple(["undrain"])
    elif action == "serve":
        serve()
    elif action == "idle":
        done = subprocess.run([WORKLANE, "idle"], env=env(), capture_output=True, text=True)
        say({0: "ok", 75: "busy"}.get(done.returncode, f"error {done.returncode} {done.stderr.strip()}"))
    elif action == "budget-take":
        budget_take(*args)
    else:
        say(f"unsupported {action}")


if __name__ == "__main__":
    main()
