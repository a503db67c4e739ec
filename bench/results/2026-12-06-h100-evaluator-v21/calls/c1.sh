# Call 1 (nvidia-h100-x1, <= 585 s): version 21 on an H100 in full. (1) the benchmark's extensions built ahead in the
# background; (2) every GPU test outside the red team (version 21's two new ones in tests/test_clock_choice.py: a
# candidate replaying against a reference that cannot be captured, and against one whose choice went eager); (3) the
# CUDA red team in full, held clock; (4) the 35-task benchmark with the time left, MoE first, 3 repeats and a 3x
# long run each.
#   bash .calls/c1.sh 2>&1 | tee $OUT/c1.log      (carry [".whl", ".calls"])
CALL=c1 DEADLINE=${DEADLINE:-585}
source .calls/setup.sh
mkdir -p /tmp/c1
( python3 bench/evaluator_bench.py --device cuda:0 --out-dir /tmp/ebw/bench --prebuild-only > /tmp/c1/prebuild.log 2>&1
  echo "prebuild rc $? at $((SECONDS - T0)) s" >> /tmp/c1/prebuild.log ) &
PB=$!
timeout 250 python3 -m pytest -q -s -m gpu -p no:cacheprovider tests --ignore=tests/redteam > /tmp/c1/gputests.log 2>&1
echo "gpu tests rc $? at $((SECONDS - T0)) s"; grep -E "^(uncapturable|reference made)|passed|failed|FAILED" /tmp/c1/gputests.log | cut -c1-700 | tail -12
KERNELRL_REDTEAM_CLOCK=held timeout 240 python3 -m pytest -q -s -m gpu -p no:cacheprovider \
    tests/redteam/test_redteam_cuda.py > /tmp/c1/redteam_cuda.log 2>&1
echo "redteam rc $? at $((SECONDS - T0)) s"; grep -E "passed|failed|FAILED|Error" /tmp/c1/redteam_cuda.log | cut -c1-300 | tail -8
grep -oE "^[a-z_]+: success=[^ ]+ speedup=[^ ]+" /tmp/c1/redteam_cuda.log | head -30
wait $PB; tail -c 600 /tmp/c1/prebuild.log
tar -C /tmp -czf "$OUT/c1-tests.tgz" c1
blane 3 3
echo "call 1 ended at $((SECONDS - T0)) s"
