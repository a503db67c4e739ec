# Call 14 and later (nvidia-h200-x4 or an H100 x4, <= 540 s each), written, not run: the paper's baselines still
# missing, one quarter of a level per GPU. SRC/LABELS pick the baselines (default: both torch.compile modes, the
# CUDA graph's rows being done for level 1 and 86 of level 2); LVL the level. Done so far (this folder's
# interim/summary.json): CUDA graph, level 1 all and level 2 86; torch.compile (default), level 1 19 tasks.
# Copy every earlier lane's report.json with valid rows of these labels into .calls/done/ first (this folder's
# raw/c12/kb/l1comp*/report/report.json for level 1; NOT raw/c10 or raw/c11's compile rows: those failed on
# the bugs fixed in 155fc07 and e672c69). ~460 compile evaluations at ~18 s: about four calls.
#   LVL=1 bash c14-next.sh; LVL=2 ...; LVL=3 ...; LVL=3 SRC=baseline:cuda-graph LABELS="reference in a CUDA graph" ...
CALL=${CALL:-c14} DEADLINE=${DEADLINE:-540}
source .calls/setup.sh
SRC=${SRC:-"baseline:compile baseline:compile-reduce-overhead"}
LABELS=${LABELS:-"torch.compile,torch.compile reduce-overhead"}
LVL=${LVL:-1}
for g in 0 1 2 3; do
  ( kblane $g l${LVL}b$g $LVL "$(python3 .calls/todo.py $LVL $((g + 1))/4 "$LABELS" .calls/done/*.json)" $SRC ) \
      > /tmp/gpu$g.log 2>&1 &
done
wait
cat /tmp/gpu*.log; for g in 0 1 2 3; do grep -v "kernels scored" /tmp/kb/l${LVL}b$g.log | grep "\[" | tail -3; done
tar -C /tmp -czf "$OUT/${CALL}kb.tgz" --exclude='*/home' kb; ls -la "$OUT"; echo "call $CALL ended at $((SECONDS - T0)) s"
