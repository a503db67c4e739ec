# Call 37 (after c36, one nvidia-h200, <= 580 s), written, not run: L1 40_LayerNorm's default torch.compile row at
# version 20 (its re-measurement keeps the lower of the two whatever the order: reverify-disagreed when they
# disagree, 0 only when the re-measurement fails), then level 3's compile baselines with the time left.
# Prepare as c36-next.sh says, with c36's lane reports added to .calls/done/; carry
# [".whl", ".calls", "kb/level1", "kb/level3"]. Run: bash .calls/c37.sh 2>&1 | tee $OUT/c37.log
CALL=c37 DEADLINE=${DEADLINE:-575}
source .calls/setup.sh
kblane 0 l1t40c37 1 40_LayerNorm baseline:compile
grep "\[" /tmp/kb/l1t40c37.log | grep -v "kernels scored" | cut -c1-400
gzip -c /tmp/kb/l1t40c37/report/report.json > "$OUT/l1t40c37-report.json.gz"
python3 - <<'PY' 2>&1 | tail -3
import json
for src in json.load(open("/tmp/kb/l1t40c37/report/report.json")).get("sources", []):
    for row in src.get("rows", []):
        rv = (row.get("timing") or {}).get("reverify") or {}
        print(src.get("label"), row.get("task"), row.get("speedup"), row.get("flags"), row.get("evaluator_version"),
              rv.get("rule"), rv.get("why"))
PY
CALL=c37 LVL=3 DEADLINE=$(( DEADLINE - (SECONDS - T0) )) bash .calls/lane1.sh
