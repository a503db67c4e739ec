# Call 5 (2026-12-06, second H100 session): version 22 on the GPU. The GPU tests (named files: the device's site
# has no boto3), the CUDA red team on the held clock, the uncapturable pair's probe (.calls/probe_k.py) on a quiet
# host, beside nvcc's prebuild and among 16 busy loops, then the 35-task benchmark's last 12 tasks with what is left.
#   bash .calls/c5.sh 2>&1 | tee $OUT/c5.log      (carry [".whl", ".calls"]; .calls/done/rows.jsonl = c4's rows)
CALL=c5 DEADLINE=${DEADLINE:-585}
source .calls/setup.sh
mkdir -p /tmp/c5
probe() {  # probe N TAG
  timeout 150 python3 .calls/probe_k.py "$1" "$2" >> /tmp/c5/probe.log 2>&1
  echo "probe $2 rc $? at $((SECONDS - T0)) s"
}
probe 2 quiet
( python3 bench/evaluator_bench.py --device cuda:0 --out-dir /tmp/ebw/bench --prebuild-only > /tmp/c5/prebuild.log 2>&1
  echo "prebuild rc $? at $((SECONDS - T0)) s" >> /tmp/c5/prebuild.log ) &
PB=$!
sleep 2; probe 2 nvcc
wait $PB; tail -1 /tmp/c5/prebuild.log
for i in $(seq 16); do ( timeout 100 sh -c 'while :; do :; done' ) & done
sleep 1; probe 3 busy16
pkill -f 'while :; do :; done'; wait 2>/dev/null
grep -E "^[0-9] .* speedup" /tmp/c5/probe.log | cut -c1-420
grep -E "Traceback|Error" /tmp/c5/probe.log | head -5
timeout 200 python3 -m pytest -q -s -m gpu -p no:cacheprovider tests/test_clock_choice.py tests/test_reference_variation.py \
    tests/test_devshare.py tests/test_graph_safety.py tests/test_block_generators.py tests/test_worker_inputs.py \
    tests/test_reports.py > /tmp/c5/gputests.log 2>&1
echo "gpu tests rc $? at $((SECONDS - T0)) s"; grep -E "^(uncapturable|reference made)|passed|failed|FAILED" /tmp/c5/gputests.log | cut -c1-600 | tail -14
KERNELRL_REDTEAM_CLOCK=held timeout 240 python3 -m pytest -q -s -m gpu -p no:cacheprovider \
    tests/redteam/test_redteam_cuda.py > /tmp/c5/redteam_cuda.log 2>&1
echo "redteam rc $? at $((SECONDS - T0)) s"; grep -E "passed|failed|FAILED|Error" /tmp/c5/redteam_cuda.log | cut -c1-300 | tail -8
grep -oE "^[a-z_.]+: success=[^ ]+ speedup=[^ ]+" /tmp/c5/redteam_cuda.log | head -30
tar -C /tmp -czf "$OUT/c5-tests.tgz" c5
blane 3 3
echo "call 5 ended at $((SECONDS - T0)) s"
