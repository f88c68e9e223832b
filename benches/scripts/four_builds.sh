#!/usr/bin/env bash
# Issue 24's whole-build figures: concurrent `worklane run --jobs -- make -j32` of a Makefile
# of 40 targets that sleep 0.2 s, at max_jobs 4, beside the same builds as plain make with the
# machine split by hand (no worklane): the floor, which includes what the targets' own
# counting costs. Each line: wall time, its ratio to the ideal (builds x 40 x 0.2 / 4 s), and
# the most targets that ran at once (sampled at every target's start, under flock).
#
#   - 4 builds: each runs on its own job slot (the ideal is 8 s; floor: 4 x make -j1);
#   - 2 builds: they trade tokens (the ideal is 4 s; floor: 2 x make -j2);
#   - 1 build: it takes every token (the ideal is 2 s; floor: make -j4).
#
#   cargo build --release -p worklane && benches/scripts/four_builds.sh [ROUNDS] [WORKLANE]
set -euo pipefail
rounds=${1:-3}
worklane=$(realpath "${2:-target/release/worklane}")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat > "$work/Makefile" <<'MK'
T := $(shell seq 1 40)
all: $(addprefix t,$(T))
t%:
	@flock $(CTR).lock sh -c 'n=$$(($$(cat $(CTR))+1)); echo $$n > $(CTR); echo $$n >> $(CTR).log'; sleep 0.2; flock $(CTR).lock sh -c 'echo $$(($$(cat $(CTR))-1)) > $(CTR)'
MK
run_round() { # BUILDS LABEL COMMAND...
  local builds=$1 label=$2; shift 2
  local dir; dir=$(mktemp -d -p "$work")
  mkdir "$dir/slots"
  echo '{"max_agents": 8, "max_jobs": 4}' > "$dir/slots/config.json"
  echo 0 > "$dir/ctr"
  local start end took ideal
  start=$(date +%s.%N)
  for _ in $(seq 1 "$builds"); do
    (cd "$work" && AGENT_SLOTS_DIR="$dir/slots" "$@" CTR="$dir/ctr") &
  done
  wait
  end=$(date +%s.%N)
  took=$(echo "$end - $start" | bc)
  ideal=$(echo "$builds * 40 * 0.2 / 4" | bc -l)
  printf '%d build(s), %s: %.2f s (%.3f x the ideal %.0f s), at most %d targets at once\n' \
    "$builds" "$label" "$took" "$(echo "$took / $ideal" | bc -l)" "$ideal" \
    "$(sort -n "$dir/ctr.log" | tail -1)"
}
for round in $(seq 1 "$rounds"); do
  echo "round $round"
  for builds in 4 2 1; do
    run_round "$builds" "worklane run --jobs -- make -j32" "$worklane" run --jobs -- make -s -j32
    run_round "$builds" "plain make -j$((4 / builds)) (floor)" make -s "-j$((4 / builds))"
  done
done
