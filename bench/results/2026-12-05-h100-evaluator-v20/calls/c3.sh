# Call 3 (nvidia-h100-x1, <= 540 s): why the MinReduction seed scored 2.26 in two of call 1's four evaluations and
# 2.63 in the others (its own time 9.84 against 8.29 us, the reference steady); then version 20's KernelBench rows
# that were never run on a GPU (L2 3 and 77 under torch.compile, both modes, and against themselves).
#   bash .calls/c3.sh 2>&1 | tee $OUT/c3.log      (carry [".whl", ".calls", "kb/level2"])
CALL=c3 DEADLINE=${DEADLINE:-540}
source .calls/setup.sh
mkdir -p /tmp/c3
# 1. in one process, one buffer after another (builds the seed's extension: ~50 s)
timeout 150 python3 .calls/minred_probe.py 24 > /tmp/c3/probe.log 2>&1; echo "probe rc $? at $((SECONDS - T0)) s"
tail -6 /tmp/c3/probe.log
# 2. the evaluator on the pair, 6 repeats and a 3x long run (a fresh folder; its prebuild reuses nothing)
timeout 150 python3 bench/evaluator_bench.py --device cuda:0 --out-dir /tmp/c3/minred --only 4 --repeats 6 \
    --long-factor 3 --clock held --max-wall-s 60 --max-minutes 2 > /tmp/c3/minred.log 2>&1
echo "minred rc $? at $((SECONDS - T0)) s"
python3 - <<'PY'
import json
for line in open("/tmp/c3/minred/rows.jsonl"):
    r = json.loads(line)
    for e in r["repeats"] + [r["long"]]:
        print(e.get("speedup"), e.get("ref_ms"), e.get("cand_ms"), e.get("rounds"), e.get("flags"), e.get("wall_s"))
PY
# 3. KernelBench L2 3 and 77 at version 20 (the kblane of the KernelBench folder's setup)
source .calls/kbsetup.sh
kblane 0 l2t3t77c3 2 3_ConvTranspose3d_Sum_LayerNorm_AvgPool_GELU,77_ConvTranspose3d_Scale_BatchNorm_GlobalAvgPool \
    baseline:compile baseline:compile-reduce-overhead baseline:self
grep "\[" /tmp/kb/l2t3t77c3.log | grep -v "kernels scored" | cut -c1-400
gzip -c /tmp/kb/l2t3t77c3/report/report.json > "$OUT/l2t3t77c3-report.json.gz"
python3 - <<'PY' 2>&1 | tail -8
import json
for src in json.load(open("/tmp/kb/l2t3t77c3/report/report.json")).get("sources", []):
    for row in src.get("rows", []):
        t = row.get("timing") or {}
        print(src.get("label"), row.get("task"), row.get("speedup"), row.get("flags"), row.get("evaluator_version"),
              row.get("wall_s"), "judged", t.get("device_compare_judged"), "redone", t.get("device_compare_redone"),
              (t.get("phases_s") or {}).get("correctness"), json.dumps(t.get("reference_variation"))[:300])
PY
cp /tmp/kb/l2t3t77c3.log "$OUT/" 2>/dev/null
tar -C /tmp -czf "$OUT/c3-minred.tgz" c3
echo "call 3 ended at $((SECONDS - T0)) s"
