# Call 4 (2026-12-06, second H100 session): the uncapturable pair's 4.34 (c3). Probe (.calls/probe_k.py) on a
# quiet host, beside nvcc's prebuild (as c3), and beside 16 busy loops; each with the v21 empty hold (1 ms) and a
# 5 ms variant (EMPTY_HOLD_MS=5). Then the 35-task benchmark's other 24 tasks at 21 with what is left.
#   bash .calls/c4.sh 2>&1 | tee $OUT/c4.log      (carry [".whl", ".calls"])
CALL=c4 DEADLINE=${DEADLINE:-585}
source .calls/setup.sh
mkdir -p /tmp/c4
probe() {  # probe N TAG [EMPTY_HOLD_MS]
  EMPTY_HOLD_MS=${3:-} timeout 150 python3 .calls/probe_k.py "$1" "$2" >> /tmp/c4/probe.log 2>&1
  echo "probe $2 rc $? at $((SECONDS - T0)) s"
}
probe 3 quiet; probe 2 quiet-hold5 5
( python3 bench/evaluator_bench.py --device cuda:0 --out-dir /tmp/ebw/bench --prebuild-only > /tmp/c4/prebuild.log 2>&1
  echo "prebuild rc $? at $((SECONDS - T0)) s" >> /tmp/c4/prebuild.log ) &
PB=$!
sleep 2; probe 2 nvcc; probe 1 nvcc-hold5 5
wait $PB; tail -1 /tmp/c4/prebuild.log
for i in $(seq 16); do ( timeout 150 sh -c 'while :; do :; done' ) & done
sleep 1; probe 2 busy16; probe 2 busy16-hold5 5
pkill -f 'while :; do :; done'; wait 2>/dev/null
grep -E "^[0-9] .* speedup" /tmp/c4/probe.log | cut -c1-900
grep -E "Traceback|Error" /tmp/c4/probe.log | head -5
tar -C /tmp -czf "$OUT/c4-probe.tgz" c4
blane 3 3
echo "call 4 ended at $((SECONDS - T0)) s"
