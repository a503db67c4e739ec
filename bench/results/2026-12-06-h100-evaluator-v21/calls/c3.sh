# Call 3 (the H100 again, <= 600 s): (1) the benchmark's extensions built ahead in the background; (2) the two GPU
# tests call 2 failed, as amended (the uncapturable self-pair's eager bound; devshare's trims counted from the
# sides' clock choices); (3) the 35-task benchmark at version 21 with the time left (v20's H100 rows are the
# comparison: ../2026-12-05-h100-evaluator-v20/benchmark), MoE first, 3 repeats and a 3x long run each.
#   bash .calls/c3.sh 2>&1 | tee $OUT/c3.log      (carry [".whl", ".calls"])
CALL=c3 DEADLINE=${DEADLINE:-585}
source .calls/setup.sh
mkdir -p /tmp/c3
( python3 bench/evaluator_bench.py --device cuda:0 --out-dir /tmp/ebw/bench --prebuild-only > /tmp/c3/prebuild.log 2>&1
  echo "prebuild rc $? at $((SECONDS - T0)) s" >> /tmp/c3/prebuild.log ) &
PB=$!
timeout 150 python3 -m pytest -q -s -m gpu -p no:cacheprovider tests/test_clock_choice.py \
    "tests/test_devshare.py::test_large_sets_give_their_cached_memory_back_between_phases" > /tmp/c3/gputests.log 2>&1
echo "gpu tests rc $? at $((SECONDS - T0)) s"; grep -E "^F?(uncapturable|reference made)|passed|failed|FAILED" /tmp/c3/gputests.log | cut -c1-900 | tail -8
wait $PB; tail -c 400 /tmp/c3/prebuild.log
tar -C /tmp -czf "$OUT/c3-tests.tgz" c3
blane 3 3
echo "call 3 ended at $((SECONDS - T0)) s"
