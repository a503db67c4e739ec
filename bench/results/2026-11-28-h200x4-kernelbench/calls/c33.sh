# Call 33 (next session, one nvidia-h200, <= 580 s), written, not run: version 19 on a GPU (a correctness set the
# device comparison finds wrong is run again through the host, where the reference's variation and precision judge
# it), then level 2's compile baselines from where c32 stopped (task 53).
# Prepare as c9.sh's header says (bench/gpu_site.sh; py-spy to .whl/py-spy; kb link; setup.sh.txt, todo.py.txt,
# lane1.sh into .calls/), copy compile-l1-v16/rows.json.gz and raw/c30-c32's *-report.json.gz into .calls/done/,
# and this file to .calls/c33.sh; carry [".whl", ".calls", "kb/level2"].
# Run: bash .calls/c33.sh 2>&1 | tee $OUT/c33.log
#   1. version 19's GPU test (the KL reordering with every set compared on the device) and version 17's;
#   2. KernelBench L2 3_ConvTranspose3d_Sum_LayerNorm_AvgPool_GELU (version 18: wrong-output 1.35e-3 on the device,
#      no account of the reference's variation) and 23_Conv3d_GroupNorm_Mean (a pure-rounding output: expected to
#      fail still, with the host's account) in both compile modes;
#   3. the level-2 compile lane with the time left.
CALL=c33 DEADLINE=${DEADLINE:-575}
source .calls/setup.sh
mkdir -p /tmp/c33
timeout 150 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_reference_variation.py > /tmp/c33/gputests.log 2>&1
echo "gpu tests rc $? at $((SECONDS - T0)) s"; tail -3 /tmp/c33/gputests.log
tar -C /tmp -czf "$OUT/c33-tests.tgz" c33
kblane 0 l2t3c33 2 3_ConvTranspose3d_Sum_LayerNorm_AvgPool_GELU,23_Conv3d_GroupNorm_Mean baseline:compile \
    baseline:compile-reduce-overhead
grep "\[" /tmp/kb/l2t3c33.log | grep -v "kernels scored" | cut -c1-600
gzip -c /tmp/kb/l2t3c33/report/report.json > "$OUT/l2t3c33-report.json.gz"
python3 - <<'PY' 2>&1 | tail -12
import json
for src in json.load(open("/tmp/kb/l2t3c33/report/report.json")).get("sources", []):
    for row in src.get("rows", []):
        t = row.get("timing") or {}
        print(src.get("label"), row.get("task"), row.get("speedup"), row.get("flags"), row.get("evaluator_version"),
              "redone", t.get("device_compare_redone"), json.dumps(t.get("reference_variation"))[:400])
PY
CALL=c33 LVL=2 DEADLINE=$(( DEADLINE - (SECONDS - T0) )) bash .calls/lane1.sh
