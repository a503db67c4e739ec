# Call 1 (nvidia-h200 asked after the H100 did not come; it ran on an H100, <= 585 s): version 21 on a GPU in full, then KernelBench at 21.
# (1) every GPU test outside the red team (version 21's two new ones in tests/test_clock_choice.py: a candidate
# replaying against a reference that cannot be captured, and against one whose choice went eager, forced);
# (2) the CUDA red team in full, held clock; (3) with the time left, KernelBench L2 3 and 77 in both torch.compile
# modes and against themselves (the KernelBench folder's c36 step 3, owed to its H200 table).
#   bash .calls/c1.sh 2>&1 | tee $OUT/c1.log      (carry [".whl", ".calls", "kb/level2"])
CALL=c1 DEADLINE=${DEADLINE:-585}
source .calls/setup.sh
mkdir -p /tmp/c1
timeout 250 python3 -m pytest -q -s -m gpu -p no:cacheprovider tests --ignore=tests/redteam > /tmp/c1/gputests.log 2>&1
echo "gpu tests rc $? at $((SECONDS - T0)) s"; grep -E "^(uncapturable|reference made)|passed|failed|FAILED" /tmp/c1/gputests.log | cut -c1-700 | tail -12
KERNELRL_REDTEAM_CLOCK=held timeout 240 python3 -m pytest -q -s -m gpu -p no:cacheprovider \
    tests/redteam/test_redteam_cuda.py > /tmp/c1/redteam_cuda.log 2>&1
echo "redteam rc $? at $((SECONDS - T0)) s"; grep -E "passed|failed|FAILED|Error" /tmp/c1/redteam_cuda.log | cut -c1-300 | tail -8
grep -oE "^[a-z_]+: success=[^ ]+ speedup=[^ ]+" /tmp/c1/redteam_cuda.log | head -30
tar -C /tmp -czf "$OUT/c1-tests.tgz" c1
kblane 0 l2t77c1 2 3_ConvTranspose3d_Sum_LayerNorm_AvgPool_GELU,77_ConvTranspose3d_Scale_BatchNorm_GlobalAvgPool \
    baseline:compile baseline:compile-reduce-overhead baseline:self
grep "\[" /tmp/kb/l2t77c1.log | grep -v "kernels scored" | cut -c1-400
gzip -c /tmp/kb/l2t77c1/report/report.json > "$OUT/l2t77c1-report.json.gz"; cp /tmp/kb/l2t77c1.log "$OUT/"
python3 - <<'PY' 2>&1 | tail -8
import json
for src in json.load(open("/tmp/kb/l2t77c1/report/report.json")).get("sources", []):
    for row in src.get("rows", []):
        t = row.get("timing") or {}
        g = t.get("graphs") or {}
        print(src.get("label"), row.get("task"), row.get("speedup"), row.get("flags"), row.get("evaluator_version"),
              row.get("wall_s"), "judged", t.get("device_compare_judged"), "redone", t.get("device_compare_redone"),
              "graphs", {k: g.get(k) for k in ("used", "cand_replays", "ref_only", "ref_eager_ms", "ref_graph_ms",
                                               "cand_eager_ms", "cand_graph_ms")}, (g.get("why") or "")[:80])
PY
echo "call 1 ended at $((SECONDS - T0)) s"
