# Call 30 (next session, one nvidia-h200, <= 580 s), written, not run: versions 17 and 18 on a GPU (17: a wrong
# output judged against the reference's own float32 precision, compare.within_precision; 18: a torch.compile
# candidate's worker imports dynamo and inductor in its warm-up, static.preimports_compiler, so the lane's "build"
# phase should fall from ~7.2 s to ~1 s and lane1.sh's last lines say so), then level 2's compile baselines.
# Prepare as c9.sh's header says (bench/gpu_site.sh; py-spy to .whl/py-spy; kb link; setup.sh.txt, todo.py.txt,
# lane1.sh into .calls/), copy compile-l1-v16/rows.json.gz into .calls/done/, and this file to .calls/c30.sh;
# carry [".whl", ".calls", "kb/level1", "kb/level2"].
# Run: bash .calls/c30.sh 2>&1 | tee $OUT/c30.log
#   1. version 17's GPU test (the precision runs on CUDA: an honest KL reordering passes, a sloppy one fails), then
#      the CUDA red team in full with the held clock (~165 s): tf32_precision and cudnn_flags still fail on a GPU
#      now that a wrong output is also judged against float64;
#   2. KernelBench L1 98_KLDivLoss in both compile modes at version 17 (version 16: wrong-output, 2.5e-3 from a
#      deterministic reference on a "small" draw), and 40_LayerNorm's default mode once more;
#   3. the level-2 compile lane with the time left.
CALL=c30 DEADLINE=${DEADLINE:-575}
source .calls/setup.sh
mkdir -p /tmp/c30
timeout 120 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_reference_variation.py > /tmp/c30/gputests.log 2>&1
echo "gpu tests rc $? at $((SECONDS - T0)) s"; tail -3 /tmp/c30/gputests.log
KERNELRL_REDTEAM_CLOCK=held timeout 280 python3 -m pytest -q -s -m gpu -p no:cacheprovider \
    tests/redteam/test_redteam_cuda.py > /tmp/c30/redteam_cuda.log 2>&1
echo "redteam rc $? at $((SECONDS - T0)) s"; grep -E "passed|failed|FAILED|Error|tf32|cudnn" /tmp/c30/redteam_cuda.log | cut -c1-300 | tail -12
tar -C /tmp -czf "$OUT/c30-tests.tgz" c30
kblane 0 l1t98c30 1 98_KLDivLoss,40_LayerNorm baseline:compile baseline:compile-reduce-overhead
grep "\[" /tmp/kb/l1t98c30.log | grep -v "kernels scored" | cut -c1-600
gzip -c /tmp/kb/l1t98c30/report/report.json > "$OUT/l1t98c30-report.json.gz"
python3 - <<'PY' 2>&1 | tail -12
import json
for src in json.load(open("/tmp/kb/l1t98c30/report/report.json")).get("sources", []):
    for row in src.get("rows", []):
        rv = (row.get("timing") or {}).get("reference_variation")
        print(src.get("label"), row.get("task"), row.get("speedup"), row.get("flags"), row.get("evaluator_version"),
              "build", (row.get("timing") or {}).get("phases_s", {}).get("build"), "preimport",
              (row.get("timing") or {}).get("compiler_preimport_s"), json.dumps(rv)[:400])
PY
CALL=c30 LVL=2 DEADLINE=$(( DEADLINE - (SECONDS - T0) )) bash .calls/lane1.sh
