# Call 27 (one nvidia-h200, <= 580 s; ran 2026-12-01 as written, c27-next.sh until then): version 16 on a GPU (3e165a0: correctness
# passes a non-tensor input as get_inputs returns it), then the compile baselines. Prepare as c9.sh's header says
# (bench/gpu_site.sh; py-spy to .whl/py-spy; kb link; setup.sh.txt, todo.py.txt, lane1.sh into .calls/), copy
# compile-l1-v15/rows.json.gz into .calls/done/, and this file to .calls/c27.sh; carry [".whl", ".calls", "kb/level1"].
# Run: bash .calls/c27.sh 2>&1 | tee $OUT/c27.log
#   1. the new GPU test (a compiled scalar task, both modes, no recompile while timed) and the reduce-overhead one;
#   2. the CUDA red team in full with the held clock (~215 s);
#   3. KernelBench L1 5 in both compile modes at version 16 (its version 15 reduce-overhead row timed out);
#   4. the level-1 compile lane with the time left (lane1.sh reads .calls/done/, so 5 is not run twice).
CALL=c27 DEADLINE=${DEADLINE:-575}
source .calls/setup.sh
mkdir -p /tmp/c27
timeout 150 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_reports.py -k "scalar_task or reduce_overhead" \
    > /tmp/c27/gputests.log 2>&1
echo "gpu tests rc $? at $((SECONDS - T0)) s"; tail -3 /tmp/c27/gputests.log
KERNELRL_REDTEAM_CLOCK=held timeout 280 python3 -m pytest -q -s -m gpu -p no:cacheprovider \
    tests/redteam/test_redteam_cuda.py > /tmp/c27/redteam_cuda.log 2>&1
echo "redteam rc $? at $((SECONDS - T0)) s"; grep -E "passed|failed|FAILED|Error" /tmp/c27/redteam_cuda.log | tail -8
tar -C /tmp -czf "$OUT/c27-tests.tgz" c27
kblane 0 l1t5c27 1 5_Matrix_scalar_multiplication baseline:compile baseline:compile-reduce-overhead
grep "\[" /tmp/kb/l1t5c27.log | grep -v "kernels scored" | cut -c1-300
gzip -c /tmp/kb/l1t5c27/report/report.json > "$OUT/l1t5c27-report.json.gz"; cp /tmp/kb/l1t5c27/report/report.json .calls/done/t5.json
CALL=c27 LVL=1 DEADLINE=$(( DEADLINE - (SECONDS - T0) )) bash .calls/lane1.sh
