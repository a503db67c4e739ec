# Call 5 (nvidia-h100-x1, <= 230 s): version 21 (each side on the better of its own two clocks) on the GPU: the CUDA
# red team's clock cases (the reference's clock must not depend on the candidate), then the four seeds whose score
# followed the reference's coin at versions 13-20 (MinReduction, UpperTriangularMatmul, TwoLinear, Linear_MeanPool_GELU),
# 4 repeats each and a 3x long run; MinReduction's extension built first, beside the red team.
#   bash .calls/c5.sh 2>&1 | tee $OUT/c5.log      (carry [".whl", ".calls"])
CALL=c5 DEADLINE=${DEADLINE:-230}
source .calls/setup.sh
mkdir -p /tmp/c5
( python3 bench/evaluator_bench.py --device cuda:0 --out-dir /tmp/c5/bench --prebuild-only --only 4 > /tmp/c5/prebuild.log 2>&1 ) &
PB=$!
KERNELRL_REDTEAM_CLOCK=held timeout 90 python3 -m pytest -q -s -m gpu -p no:cacheprovider \
    tests/redteam/test_redteam_cuda.py -k "reference_clock" > /tmp/c5/redteam_clock.log 2>&1
echo "redteam clock rc $? at $((SECONDS - T0)) s"; grep -E "passed|failed|FAILED|success=" /tmp/c5/redteam_clock.log | cut -c1-400
wait $PB; tail -c 300 /tmp/c5/prebuild.log; echo
l=$(left); mm=$(python3 -c "print(round(max(0.5, ($l - 25) / 60), 2))")
timeout "$l" python3 bench/evaluator_bench.py --device cuda:0 --out-dir /tmp/c5/bench --no-prebuild --only 4,12,19,25 \
    --repeats 4 --long-factor 3 --clock held --max-wall-s 60 --max-minutes "$mm" > /tmp/c5/bench.log 2>&1
echo "bench rc $? at $((SECONDS - T0)) s"
python3 - <<'PY'
import json
for line in open("/tmp/c5/bench/rows.jsonl"):
    r = json.loads(line)
    for e in r["repeats"] + [r["long"]]:
        g = e.get("graphs") or {}
        print(r["task"][8:40], e.get("speedup"), e.get("cand_ms"), e.get("ref_ms"), "ref", g.get("ref_eager_ms"),
              g.get("ref_graph_ms"), "cand", g.get("cand_eager_ms"), g.get("cand_graph_ms"), g.get("used"),
              g.get("cand_replays"), g.get("ref_only"), (g.get("why") or "")[:60], e.get("flags"))
PY
cp /tmp/c5/bench/rows.jsonl "$OUT/rows-c5.jsonl" 2>/dev/null
tar -C /tmp -czf "$OUT/c5.tgz" c5
echo "call 5 ended at $((SECONDS - T0)) s"
