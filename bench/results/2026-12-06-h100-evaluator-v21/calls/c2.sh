# Call 2 (nvidia-h200 asked; call 1 ran on an H100 all the same, <= 585 s): (0) the GPU tests call 1 missed (its
# pytest collected every test file, and the device's site has no boto3: 2 collection errors), named one by one; then
# KernelBench's torch.compile baselines at version 21. (1) Rows whose reference was
# eager by its own choice at versions 15-19 (124 of the 391 compile rows: timing.graphs.why "reference: eager calls
# faster than graph replay", mostly a tie of two ms-scale clocks) again at 21, where the candidate now takes its own
# better clock: level 1's 40_LayerNorm (15.62 at 18, its re-measurement's order mattered before 20), 41_Max_Pooling_1D
# (3.95, 1.77), 100_HingeLoss (reduce-overhead 2.39); level 2's 20 (1.40, 1.32; its reference's clocks 2% apart), 70
# (1.01; 8% apart) and 78 (reduce-overhead 1.01; 16% apart). (2) Level 2's rest (96 reduce-overhead, 97-100).
# (3) Level 3's compile lane with the time left.
#   bash .calls/c2.sh 2>&1 | tee $OUT/c2.log      (carry [".whl", ".calls", "kb/level1", "kb/level2", "kb/level3"])
CALL=c2 DEADLINE=${DEADLINE:-585}
source .calls/setup.sh
mkdir -p /tmp/c2
timeout 250 python3 -m pytest -q -s -m gpu -p no:cacheprovider tests/test_clock_choice.py tests/test_reference_variation.py \
    tests/test_devshare.py tests/test_graph_safety.py tests/test_block_generators.py tests/test_worker_inputs.py \
    tests/test_reports.py > /tmp/c2/gputests.log 2>&1
echo "gpu tests rc $? at $((SECONDS - T0)) s"; grep -E "^(uncapturable|reference made)|passed|failed|FAILED" /tmp/c2/gputests.log | cut -c1-900 | tail -14
tar -C /tmp -czf "$OUT/c2-tests.tgz" c2
show() {  # show LANE: each row's score, version and both sides' clocks
  grep "\[" "/tmp/kb/$1.log" | grep -v "kernels scored" | cut -c1-300
  gzip -c "/tmp/kb/$1/report/report.json" > "$OUT/$1-report.json.gz"; cp "/tmp/kb/$1.log" "$OUT/"
  python3 - "/tmp/kb/$1/report/report.json" <<'PY' 2>&1 | tail -12
import json, sys
for src in json.load(open(sys.argv[1])).get("sources", []):
    for row in src.get("rows", []):
        t = row.get("timing") or {}
        g = t.get("graphs") or {}
        print(src.get("label")[:28], row.get("task_key", "")[12:50], row.get("speedup"), row.get("flags"),
              row.get("evaluator_version"), row.get("wall_s"), {k: g.get(k) for k in ("used", "cand_replays",
              "ref_only", "ref_eager_ms", "ref_graph_ms", "cand_eager_ms", "cand_graph_ms")}, (g.get("why") or "")[:70])
PY
}
kblane 0 l1v21c2 1 40_LayerNorm,41_Max_Pooling_1D,100_HingeLoss baseline:compile baseline:compile-reduce-overhead
show l1v21c2
kblane 0 l2v21c2 2 20_ConvTranspose3d_Sum_ResidualAdd_Multiply_ResidualAdd,70_Gemm_Sigmoid_Scaling_ResidualAdd,78_ConvTranspose3d_Max_Max_Sum \
    baseline:compile baseline:compile-reduce-overhead
show l2v21c2
CALL=c2 LVL=2 DEADLINE=$(( DEADLINE - (SECONDS - T0) )) bash .calls/lane1.sh
CALL=c2 LVL=3 DEADLINE=$(( DEADLINE - (SECONDS - T0) )) bash .calls/lane1.sh
echo "call 2 ended at $((SECONDS - T0)) s"
