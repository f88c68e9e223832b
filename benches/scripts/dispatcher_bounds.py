#!/usr/bin/env python3
"""Issue 33's figures for the dispatcher, with real processes:

  1. idle at the cap: max_agents 1, one `worklane run` holding the slot, one row queued; the
     dispatcher's CPU time over 5 s (share of one core) and how far slots.lock's epoch rose;
  2. admission after a release: the time from the holder's command ending to the queued row's
     command starting (through the dispatcher's wake-up, a driver's start and its claim);
  3. a member's connection flood: root's `queue ls` latency while a member of the directory's
     group (uid 65534 through setpriv) connects and closes from 2 processes as fast as it can,
     beside the same requests with no flood.

Run as root (the member is made with setpriv), from the workspace:

  cargo build --release -p worklane && python3 benches/scripts/dispatcher_bounds.py [ROUNDS] [WORKLANE]
"""
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 else 5
WORKLANE = os.path.realpath(sys.argv[2] if len(sys.argv) > 2 else "target/release/worklane")
GROUP = 23_459
MEMBER = ["setpriv", "--reuid=65534", "--regid=65534", f"--groups={GROUP}"]


def site(config):
    """A slot directory (root's, shared with GROUP, 2770) and the environment to use it."""
    top = tempfile.mkdtemp()
    os.chmod(top, 0o711)
    slots = os.path.join(top, "slots")
    os.mkdir(slots)
    os.chown(slots, 0, GROUP)
    os.chmod(slots, 0o2770)
    with open(os.path.join(slots, "config.json"), "w") as f:
        f.write(config)
    env = dict(os.environ, AGENT_SLOTS_DIR=slots, WORKLANE_STATE_DIR=os.path.join(top, "state"))
    env.pop("AGENT_SLOTS_CONFIG", None)
    return top, slots, env


def dispatcher(env, slots):
    d = subprocess.Popen([WORKLANE, "dispatcher"], env=env, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    sock = os.path.join(slots, "dispatcher.sock")
    while not os.path.exists(sock):
        time.sleep(0.01)
    time.sleep(0.2)
    return d


def ticks(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def epoch(slots):
    ns = [int(n.rsplit(".", 1)[1]) for n in os.listdir(slots) if n.startswith("slots.lock.epoch.")]
    return max(ns, default=0)


def idle_and_admission():
    top, slots, env = site('{"max_agents": 1}')
    d = dispatcher(env, slots)
    release = os.path.join(top, "release")
    os.mkfifo(release)
    holder = subprocess.Popen([WORKLANE, "run", "--", "sh", "-c", f'read x < {release}'], env=env)
    while not any(n.startswith("agent-") for n in os.listdir(slots)):
        time.sleep(0.01)
    started = os.path.join(top, "started")
    subprocess.run([WORKLANE, "enqueue", "--lane", "w", "--", "sh", "-c",
                    f'python3 -c "import time; print(time.time())" > {started}.tmp; mv {started}.tmp {started}'],
                   env=env, check=True, stdout=subprocess.DEVNULL)
    time.sleep(0.5)
    t0, e0, w0 = ticks(d.pid), epoch(slots), time.time()
    time.sleep(5)
    t1, e1, w1 = ticks(d.pid), epoch(slots), time.time()
    cpu = (t1 - t0) / 100 / (w1 - w0)
    with open(release, "w") as f:
        f.write("go\n")
    ended = time.time()
    holder.wait()
    while not os.path.exists(started):
        time.sleep(0.001)
    with open(started) as f:
        latency = float(f.read()) - ended
    d.terminate()
    d.wait()
    return cpu, e1 - e0, latency


def ls_latencies(env, n=10):
    out = []
    for _ in range(n):
        t = time.time()
        subprocess.run([WORKLANE, "queue", "ls", "--json"], env=env, check=True,
                       stdout=subprocess.DEVNULL)
        out.append(time.time() - t)
    return out


FLOOD = """import socket, sys, time
end = time.time() + float(sys.argv[2])
while time.time() < end:
    s = socket.socket(socket.AF_UNIX)
    try:
        s.connect(sys.argv[1])
    except OSError:
        pass
    s.close()
"""


def flood():
    top, slots, env = site('{"max_agents": 1}')
    d = dispatcher(env, slots)
    quiet = ls_latencies(env)
    sock = os.path.join(slots, "dispatcher.sock")
    flooders = [subprocess.Popen(MEMBER + ["/usr/bin/python3", "-c", FLOOD, sock, "6"])
                for _ in range(2)]
    time.sleep(0.5)
    flooded = ls_latencies(env)
    for f in flooders:
        f.wait()
    d.terminate()
    d.wait()
    return quiet, flooded


def ms(xs):
    return f"median {statistics.median(xs) * 1000:.1f} ms, max {max(xs) * 1000:.1f} ms"


def main():
    cpus, rises, lats = [], [], []
    for _ in range(ROUNDS):
        cpu, rise, lat = idle_and_admission()
        cpus.append(cpu)
        rises.append(rise)
        lats.append(lat)
    print(f"idle at the cap, 5 s with one row waiting ({ROUNDS} rounds):")
    print(f"  dispatcher CPU: median {statistics.median(cpus) * 100:.2f} % of a core, "
          f"max {max(cpus) * 100:.2f} %")
    print(f"  slots.lock epoch rose by: {sorted(rises)}")
    print(f"  release to the row's command started: {ms(lats)}")
    quiet, flooded = [], []
    for _ in range(max(1, ROUNDS // 2)):
        q, f = flood()
        quiet += q
        flooded += f
    print(f"root's queue ls, no flood ({len(quiet)}): {ms(quiet)}")
    print(f"root's queue ls, a member flooding from 2 processes ({len(flooded)}): {ms(flooded)}")


if __name__ == "__main__":
    main()
