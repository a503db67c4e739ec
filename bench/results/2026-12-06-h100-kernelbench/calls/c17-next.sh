# Call 17 (next session; rewritten 2026-12-07 after c15-c16 at version 25): level 3's self-pairs where c16 left them
# (32-50: the RNNs, attention, UNet, NetVLAD, Mamba), 30_SwinTransformerV2 once more (0.725 `unstable-timing` at 25:
# a second draw of a host-bound task that cannot be captured; packed as l3c17s-rerun.json.gz, not *-report.json.gz,
# so the table keeps c16's first draw and the README gives both: a miss is not replaced by a luckier rerun), then
# the CUDA-graph baseline over level 1 until the deadline. Prepare as ../README.md says (.calls/done/ = this
# folder's raw/c*/*-report.json.gz only, c15's and c16's included); carry [".whl", ".calls", "kb/level1", "kb/level3"]
# (the probe, ~50 s, first):
#   bash .calls/c17.sh 2>&1 | tee $OUT/c17.log
CALL=c17 DEADLINE=${DEADLINE:-585}
source .calls/setup.sh
uptime
# 33_BatchNorm's first graph replayed 4.7% slower than its three others in c15's probe; is it the first allocation
# or the first capture? Graphs captured in a shuffled order (capture_rank), three seeds (three orders); the probe's
# GPU test first (its shuffled capture is new, not yet run on a GPU)
timeout 60 python3 -m pytest -q -s -m gpu -p no:cacheprovider tests/test_bench_scripts.py -k placement 2>&1 | tail -3
# (since f16bc0d the copies are all allocated before any capture, where c15's probe interleaved each copy with its
# graph's outputs: the first run, capture in allocation order, is the control for that change)
for sd in 0 1 2 3; do
  SH=--shuffle-capture; (( sd == 0 )) && SH=
  timeout 40 python3 bench/placement_probe.py kb/level1/33_BatchNorm.py --graph $SH --rounds 16 \
      --seed $sd 2>&1 | tail -1 | tee -a "$OUT/c17-probe.jsonl" | cut -c1-400
done
CALL=c17a LVL=3 SRC=baseline:self LABELS="the reference itself" DEADLINE=$(( $(left) - 10 )) bash .calls/lane1.sh
# lane1.sh sourced setup.sh afresh (its own clock, /tmp/kb emptied: its lane's report is already in $OUT's tar)
# (DEADLINE counts from T0: this lane gets 100 s from now, when the call has 200 s left)
(( $(left) > 200 )) && DEADLINE=$(( SECONDS - T0 + 100 )) kblane 0 l3c17s 3 30_SwinTransformerV2 baseline:self
if [ -s /tmp/kb/l3c17s/report/report.json ]; then  # (no report, no file: an empty .gz is what c16b left)
  mkdir -p /tmp/lanes_c17s && gzip -c /tmp/kb/l3c17s/report/report.json > /tmp/lanes_c17s/l3c17s-rerun.json.gz
  cp /tmp/kb/l3c17s.log /tmp/lanes_c17s/; tar -C /tmp -cf "$OUT/c17s-lanes.tar" lanes_c17s
  grep "\[" /tmp/kb/l3c17s.log | cut -c1-200 | tail -2
fi
CALL=c17b LVL=1 SRC=baseline:cuda-graph LABELS="reference in a CUDA graph" DEADLINE=$(( $(left) - 10 )) \
    bash .calls/lane1.sh
echo "call 17 ended at $((SECONDS - T0)) s"
