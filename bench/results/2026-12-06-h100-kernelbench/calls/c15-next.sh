# Call 15 (next session; written 2026-12-06 after c12-c14; 2026-12-07: run only in part at 24, as c15m-o, see
# ../README.md; now for version 25: its staging test added to 1, and 93 in 2 should read 1.00): on an H100. Prepare as ../README.md
# says (setup.sh, lane1.sh, todo.py from ../../2026-12-06-h100-evaluator-v21/calls/; this file as .calls/c15.sh;
# bash bench/gpu_site.sh; .calls/done/ = raw/c9, c10, c12-c15's *-report.json.gz), carry
# [".whl", ".calls", "kb/level1", "kb/level2"]:
#   bash .calls/c15.sh 2>&1 | tee $OUT/c15.log
# 1. the GPU tests version 24 touches (the forward's temporaries measured, the one-span self-pair, devshare's trims);
# 2. level 1's boundary tasks at 24, twice each: 93_masked_cumsum (0.968 at 23, two spans: its 4 GiB x * mask should
#    now give one span), 34_InstanceNorm (0.976 at 23, one span, graphs both sides), 33_BatchNorm (1.023 at 22, two
#    spans), 46 and 63 (0.284/0.283 of the H100 at two spans, 1.00 at 22), 38_L1Norm_ (abs(x): 8 GiB of temporaries),
#    each row's spans, forward_transient_mib and peak memory printed: are the 2% misses repeatable or one-offs?
#    Before them, bench/placement_probe.py on 34, 33 and 19: does a set's place in memory alone move such a kernel?
# 3. level 2's self-pairs where c14 left them (76-100) until the deadline.
# On a machine of several GPUs (an nvidia-h100-x4 or -x2, when lent; added 2026-12-06 in the session after, dry-run
# with stubs only): 1 and 2 run on GPU 0 while every other GPU runs a lane of level 2's rest and then level 3, the
# reference against itself (lanes-next.sh as .calls/lanes.sh, sourced in a subshell: one setup, one /tmp/kb; a second
# setup.sh would delete the running lanes' folders), in place of 3. Carry also "kb/level3"; it returns
# c15x-lanes.tar (those lanes' reports and logs) beside c15-lanes.tar.
CALL=c15 DEADLINE=${DEADLINE:-585}
source .calls/setup.sh
NGPU=$(nvidia-smi -L | wc -l)
if (( NGPU > 1 )); then
  ( CALL=c15x GPUS="$(seq -s ' ' 1 $((NGPU - 1)))" LVLS="2 3" SRC=baseline:self LABELS="the reference itself"
    source .calls/lanes.sh ) > /tmp/c15x.log 2>&1 &
fi
uptime
CUDA_VISIBLE_DEVICES=0 timeout 200 python3 -m pytest -q -s -m gpu -p no:cacheprovider tests/test_worker_inputs.py tests/test_large_sets.py tests/test_devshare.py tests/test_bench_scripts.py \
    > /tmp/c15-gputests.log 2>&1
echo "gpu tests rc $? at $((SECONDS - T0)) s"; grep -oE "(one-span self-pair|masked cumsum temporaries MiB|placement probe):.*|[0-9]+ (passed|failed).*|FAILED.*" \
    /tmp/c15-gputests.log | cut -c1-400 | tail -10
cp /tmp/c15-gputests.log "$OUT/"
# does a set's place in memory alone move a 4-8 GiB memory-bound kernel by ~2%? (bench/placement_probe.py)
CUDA_VISIBLE_DEVICES=0 timeout 120 python3 bench/placement_probe.py kb/level1/34_InstanceNorm.py kb/level1/33_BatchNorm.py kb/level1/19_ReLU.py \
    --graph --rounds 16 2>&1 | tee "$OUT/c15-probe.jsonl" | cut -c1-400
echo "probe done at $((SECONDS - T0)) s"
B6=93_masked_cumsum,34_InstanceNorm,33_BatchNorm,46_Average_Pooling_3D,63_conv_standard_2D__square_input__square_kernel,38_L1Norm_
DEADLINE=$(( SECONDS - T0 + 150 )) kblane 0 l1c15a 1 "$B6" baseline:self  # (each lane stops within 150 s)
DEADLINE=$(( SECONDS - T0 + 150 )) kblane 0 l1c15b 1 "$B6" baseline:self
mkdir -p /tmp/lanes_c15
for L in l1c15a l1c15b; do
  [ -f /tmp/kb/$L/report/report.json ] || continue
  python3 - /tmp/kb/$L/report/report.json <<'PY' 2>&1 | tail -8
import json, sys  # per task: score unrounded, flags, spans, forward temporaries (v24), peak MiB, graphs, wall
for src in json.load(open(sys.argv[1])).get("sources", []):
    for r in src.get("rows", []):
        t = r.get("timing") or {}
        g = t.get("graphs") or {}
        print(sys.argv[1][8:14], r["task_key"][15:40], t.get("score_raw"), ",".join(r.get("flags") or [])[:40],
              t.get("spans_per_block"), t.get("forward_transient_mib"), t.get("peak_reserved_mib"), g.get("used"),
              g.get("cand_replays"), r.get("wall_s"), (r.get("error") or "")[:120])
PY
  gzip -c /tmp/kb/$L/report/report.json > /tmp/lanes_c15/$L-report.json.gz; cp /tmp/kb/$L.log /tmp/lanes_c15/
done
tar -C /tmp -cf "$OUT/c15-lanes.tar" lanes_c15
if (( NGPU > 1 )); then
  wait  # the other GPUs' lanes
  cat /tmp/c15x.log
elif nvidia-smi -L | grep -q H100; then
  CALL=c15c LVL=2 SRC=baseline:self LABELS="the reference itself" DEADLINE=$(( $(left) - 10 )) bash .calls/lane1.sh
else
  echo "not an H100 ($(nvidia-smi -L | head -1)): level 2's lane skipped (the tables are H100's); the red team instead"
  KERNELRL_REDTEAM_CLOCK=held timeout $(( $(left) - 15 )) python3 -m pytest -q -s -m gpu -p no:cacheprovider \
      tests/redteam/test_redteam_cuda.py > /tmp/c15-redteam.log 2>&1
  echo "redteam rc $? at $((SECONDS - T0)) s"; grep -E "passed|failed|FAILED" /tmp/c15-redteam.log | cut -c1-300 | tail -6
  gzip -c /tmp/c15-redteam.log > "$OUT/c15-redteam.log.gz"
fi
echo "call 15 ended at $((SECONDS - T0)) s"
