# Call 8 (next session; written 2026-12-06, not run): version 22 as committed (1 ms empty hold, the quartile) in full
# on a quiet machine, then the 35-task benchmark's last 12 tasks (~28 s each: ~8 fit). Prepare: .whl (bash
# bench/gpu_site.sh); ../2026-12-06-h100-evaluator-v21/calls/setup.sh and this file (as c8.sh) into .calls/;
# ../2026-12-06-h100-evaluator-v21/raw/c4/rows.jsonl into .calls/done/rows.jsonl; carry [".whl", ".calls"].
#   bash .calls/c8.sh 2>&1 | tee $OUT/c8.log
# Commit $OUT under raw/c8/; then c9 = this file's blane line alone for what is left, and summarize/compare as the
# README's Next calls say.
CALL=c8 DEADLINE=${DEADLINE:-585}
source .calls/setup.sh
mkdir -p /tmp/c8
uptime; ps -eo pcpu,args --sort=-pcpu | head -4 | cut -c1-120
KERNELRL_REDTEAM_CLOCK=held timeout 300 python3 -m pytest -q -s -m gpu -p no:cacheprovider \
    tests/redteam/test_redteam_cuda.py > /tmp/c8/redteam_cuda.log 2>&1
echo "redteam rc $? at $((SECONDS - T0)) s"; grep -E "passed|failed|FAILED|Error" /tmp/c8/redteam_cuda.log | cut -c1-300 | tail -8
grep -oE "^\.?[a-z_]+: success=[^ ]+ speedup=[^ ]+" /tmp/c8/redteam_cuda.log | head -30
timeout 200 python3 -m pytest -q -s -m gpu -p no:cacheprovider tests/test_clock_choice.py tests/test_reference_variation.py \
    tests/test_devshare.py tests/test_graph_safety.py tests/test_block_generators.py tests/test_worker_inputs.py \
    tests/test_reports.py > /tmp/c8/gputests.log 2>&1
echo "gpu tests rc $? at $((SECONDS - T0)) s"; grep -E "^(uncapturable|reference made)|passed|failed|FAILED" /tmp/c8/gputests.log | cut -c1-600 | tail -14
tar -C /tmp -czf "$OUT/c8-tests.tgz" c8
( python3 bench/evaluator_bench.py --device cuda:0 --out-dir /tmp/ebw/bench --prebuild-only > /tmp/ebw/prebuild.log 2>&1 )
echo "prebuild at $((SECONDS - T0)) s"
blane 3 3
echo "call 8 ended at $((SECONDS - T0)) s"
