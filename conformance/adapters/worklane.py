#!/usr/bin/env python3
"""The conformance adapter for worklane itself: each action through the `worklane` CLI.

The binary is $WORKLANE (default: `worklane` on PATH); the slot directory is
$CONFORMANCE_DIR, given to worklane as AGENT_SLOTS_DIR. See conformance/README.md for the
contract every adapter follows.
"""

import json
import os
import subprocess
import sys

WORKLANE = os.environ.get("WORKLANE", "worklane")


def say(line):
    print(line, flush=True)


def env():
    e = dict(os.environ, AGENT_SLOTS_DIR=os.environ["CONFORMANCE_DIR"])
    e.pop("AGENT_SLOTS_CONFIG", None)
    e.pop("WORKLANE_FLEET", None)
    return e


def hold(argv):
    """Runs `worklane ARGV --status-fd 3 -- cat`: `cat` holds the slot until our stdin closes."""
    read_end, write_end = os.pipe()
    child = subprocess.Popen(
        [WORKLANE] + argv + ["--status-fd", str(write_end), "--", "cat"],
        stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        pass_fds=(write_end,), env=env(),
    )
    os.close(write_end)
    events = os.fdopen(read_end)
    for line in events:
        event = json.loads(line)
        kind = event.get("event")
        if kind == "taken":
            say(f"admitted {event['slot']} {event['epoch']}")
            sys.stdin.read()  # held until the runner closes our stdin
            child.stdin.close()
            child.wait()
            say("released")
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


def simple(argv):
    done = subprocess.run([WORKLANE] + argv, env=env(), capture_output=True, text=True)
    if done.returncode == 0:
        say("ok")
    else:
        say(f"error {done.returncode} {done.stderr.strip()}")


def main():
    action, args = sys.argv[1], sys.argv[2:]
    if action == "take":
        hold(["run", "-n", "--kind", args[0]])
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
