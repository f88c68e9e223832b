#!/usr/bin/env python3
"""Times whole processes side by side, alternating them run by run.

    alternate.py RUNS 'COMMAND A' 'COMMAND B' ['COMMAND C' ...]

Each round starts every command once, in the order given (A B C A B C ...), after five rounds
not counted, with stdout and stderr to /dev/null; a run is timed from posix_spawn to waitpid.
Prints each command's median wall time and its ratio to A's: the median of the per-round
ratios, which holds when the machine's speed drifts during the measurement. A command that
exits non-zero stops the measurement. Python's stdlib only.

Example (BENCHMARKS.md): D=$(mktemp -d /var/tmp/wl.XXXX); touch $D/F;
AGENT_SLOTS_DIR=$D/slots benches/scripts/alternate.py 300 "flock -n $D/F true" \
    "target/dist/worklane run -- true"
"""
import os
import shlex
import shutil
import statistics
import sys
import time

WARMUP = 5


def main() -> int:
    if len(sys.argv) < 4 or not sys.argv[1].isdigit() or int(sys.argv[1]) < 1:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 64
    runs = int(sys.argv[1])
    commands = [shlex.split(c) for c in sys.argv[2:]]
    paths = []
    for argv in commands:
        path = shutil.which(argv[0])
        if path is None:
            print(f"alternate.py: {argv[0]}: not found", file=sys.stderr)
            return 127
        paths.append(path)
    null = os.open(os.devnull, os.O_RDWR)
    actions = [(os.POSIX_SPAWN_DUP2, null, 1), (os.POSIX_SPAWN_DUP2, null, 2)]
    times = [[] for _ in commands]
    for round_ in range(WARMUP + runs):
        for k, argv in enumerate(commands):
            start = time.perf_counter_ns()
            pid = os.posix_spawn(paths[k], argv, os.environ, file_actions=actions)
            _, status = os.waitpid(pid, 0)
            elapsed = time.perf_counter_ns() - start
            if os.waitstatus_to_exitcode(status) != 0:
                print(f"alternate.py: {shlex.join(argv)} exited {status:#x}", file=sys.stderr)
                return 1
            if round_ >= WARMUP:
                times[k].append(elapsed / 1e6)
    base = times[0]
    for k, argv in enumerate(commands):
        ratio = statistics.median(t / b for t, b in zip(times[k], base))
        print(
            f"{statistics.median(times[k]):8.3f} ms  ratio {ratio:5.3f}  "
            f"(min {min(times[k]):.3f}, max {max(times[k]):.3f})  {shlex.join(argv)}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
