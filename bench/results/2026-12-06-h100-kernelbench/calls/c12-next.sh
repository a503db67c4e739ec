# Call 12 (next session; written 2026-12-06, not run): version 23 on an H100. Prepare as ../README.md says (setup.sh,
# lane1.sh, todo.py from ../../2026-12-06-h100-evaluator-v21/calls/; this file as .calls/c12.sh; bash bench/gpu_site.sh),
# carry [".whl", ".calls", "kb/level1", "kb/level2"]:
#   bash .calls/c12.sh 2>&1 | tee $OUT/c12.log
# 1. the 24 level-1 self-pairs that ran out of memory at 22, with each worker's memory beside them (nvidia-smi, 1 s;
#    ~20 s each expected: one-span blocks are twice as many);
# 2. the GPU tests version 23 touches (the one-span self-pair, the template on the GPU, block generators, devshare);
# 3. level 2's self-pairs from the start (lane1.sh: todo.py picks what .calls/done/ lacks) until the deadline.
# What 1 or 2 leave undone is the next call's first work; the CUDA red team at 23 (~250 s) follows in a call of its own.
# Commit $OUT under raw/c12/ and merge with bench/kernelbench_summary.py (later reports win) into self-l1-v23/.
CALL=c12 DEADLINE=${DEADLINE:-585}
source .calls/setup.sh
uptime
nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader -l 1 > /tmp/c12-smi.log 2>&1 &
SMI=$!
L24=19_ReLU,20_LeakyReLU,21_Sigmoid,22_Tanh,23_Softmax,24_LogSoftmax,25_Swish,26_GELU_,27_SELU_,28_HardSigmoid,29_Softplus,30_Softsign,31_ELU,32_HardTanh,34_InstanceNorm,35_GroupNorm_,36_RMSNorm_,37_FrobeniusNorm_,38_L1Norm_,39_L2Norm_,45_Average_Pooling_2D,76_conv_standard_1D_dilated_strided__,87_conv_pointwise_2D,93_masked_cumsum
DEADLINE=420 kblane 0 l1c12 1 "$L24" baseline:self  # (the lane stops by 420 s: the GPU tests follow)
kill $SMI; gzip -c /tmp/c12-smi.log > "$OUT/c12-smi.log.gz"
grep -v "kernels scored" /tmp/kb/l1c12.log | grep "\[" | cut -c1-300 | tail -26
python3 - /tmp/kb/l1c12/report/report.json <<'PY' 2>&1 | tail -26
import json, sys  # per task: score, flags, spans a block, each worker's peak reserved MiB (version 23), wall
for src in json.load(open(sys.argv[1])).get("sources", []):
    for r in src.get("rows", []):
        t = r.get("timing") or {}
        print(r["task_key"][15:45], r.get("speedup"), ",".join(r.get("flags") or [])[:40], t.get("spans_per_block"),
              t.get("peak_reserved_mib"), r.get("wall_s"), (r.get("error") or "")[:120])
PY
mkdir -p /tmp/lanes_c12 && gzip -c /tmp/kb/l1c12/report/report.json > /tmp/lanes_c12/l1c12-report.json.gz
cp /tmp/kb/l1c12.log /tmp/lanes_c12/ && tar -C /tmp -cf "$OUT/c12-lanes.tar" lanes_c12
timeout $(( $(left) < 170 ? $(left) : 170 )) python3 -m pytest -q -s -m gpu -p no:cacheprovider tests/test_large_sets.py tests/test_worker_inputs.py \
    tests/test_block_generators.py tests/test_devshare.py > /tmp/c12-gputests.log 2>&1
echo "gpu tests rc $? at $((SECONDS - T0)) s"; grep -E "^one-span|passed|failed|FAILED" /tmp/c12-gputests.log | cut -c1-400 | tail -8
cp /tmp/c12-gputests.log "$OUT/"
CALL=c12b LVL=2 SRC=baseline:self LABELS="the reference itself" DEADLINE=$(( $(left) - 10 )) bash .calls/lane1.sh
echo "call 12 ended at $((SECONDS - T0)) s"
