#!/bin/sh
# System calls per operation of `benches/examples/ops.rs`, each kind apart: the operation is
# run N and 2N times under `strace -c -f` and the difference divided by N, so that the
# process's start and the setup are left out.
#
#   cargo build --release -p worklane-benches --example ops
#   sh benches/scripts/syscalls.sh [OP...]        # default: guard lease budget take
#
# DIR (where the slot directories go) is $TMPDIR or /var/tmp; N is $N or 1000.
set -eu
ops=${OPS_BIN:-${CARGO_TARGET_DIR:-target}/release/examples/ops}
parent=${TMPDIR:-/var/tmp}
n=${N:-1000}
[ -x "$ops" ] || { echo "no $ops: cargo build --release -p worklane-benches --example ops" >&2; exit 2; }
[ $# -gt 0 ] || set -- guard lease budget take
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for op in "$@"; do
    strace -f -c -o "$out/a" "$ops" "$op" "$n" "$parent" > /dev/null
    strace -f -c -o "$out/b" "$ops" "$op" $((2 * n)) "$parent" > /dev/null
    echo "== $op: system calls per operation (N = $n)"
    # Columns of `strace -c`: % time, seconds, usecs/call, calls, [errors,] syscall.
    awk -v n="$n" '
        FNR == 1 { file++ }
        /^[ ]*[0-9.]+ +[0-9.]+ +[0-9]+ +[0-9]+/ {
            name = $NF; calls = $4
            if (file == 1) a[name] = calls; else b[name] = calls
        }
        END {
            for (k in b) {
                d = (b[k] - a[k]) / n
                if (d >= 0.05) printf "%8.1f  %s\n", d, k
            }
        }' "$out/a" "$out/b" | sort -rn
done
