#!/bin/bash
# 20 jobs of 200 ms at cap 1, started 50 ms apart, each `worklane run -- sh -c '...; sleep 0.2'`
# in a fresh slot directory under /var/tmp; prints the wall time from the first start until
# all are done, and the order they ran in. Usage: twenty-jobs-at-cap-1.sh PATH/TO/worklane
set -eu
BIN=${1:?usage: $0 PATH/TO/worklane}
D=$(mktemp -d /var/tmp/wl20.XXXX)
echo '{"max_agents": 1}' > $D/config.json
export AGENT_SLOTS_DIR=$D
start=$(date +%s.%N)
for i in $(seq 1 20); do
  $BIN run -- sh -c "echo $i >> $D/order; sleep 0.2" &
  sleep 0.05
done
wait
end=$(date +%s.%N)
echo "total $(echo "$end - $start" | bc) s; order: $(tr '\n' ' ' < $D/order)"
rm -rf $D
