# Call 10 (next session, after c9-next.sh; nvidia-h200-x4 or nvidia-h100-x4, <= 540 s), written, not run: the paper's
# three baselines over KernelBench level 1, one quarter of the tasks per GPU (one `kernelrl bench` per GPU, its own
# store). Prepare as c9-next.sh says, plus cp todo.py.txt .calls/todo.py; todo.py lists kb/level1 at call time,
# so nothing may be copied into kb/ before it (call 5's lanes overlapped because of that). A lane's report is
# partial when --max-minutes ends it: copy the earlier calls' lane report.json files into .calls/done/ and run this
# again (todo.py leaves out tasks every baseline already has), then merge every report.json with
# bench/kernelbench_summary.py (later over earlier). LVL=2 or 3 for the other levels.
CALL=c10 DEADLINE=${DEADLINE:-540}
source .calls/setup.sh
SRC="baseline:cuda-graph baseline:compile baseline:compile-reduce-overhead"
LABELS="reference in a CUDA graph,torch.compile,torch.compile reduce-overhead"
LVL=${LVL:-1}
for g in 0 1 2 3; do
  ( kblane $g l${LVL}base$g $LVL "$(python3 .calls/todo.py $LVL $((g + 1))/4 "$LABELS" .calls/done/*.json)" $SRC ) \
      > /tmp/gpu$g.log 2>&1 &
done
wait
cat /tmp/gpu*.log; for g in 0 1 2 3; do grep -v "kernels scored" /tmp/kb/l${LVL}base$g.log | grep "\[" | tail -3; done
tar -C /tmp -czf "$OUT/c10kb.tgz" --exclude='*/home' kb; ls -la "$OUT"; echo "call 10 ended at $((SECONDS - T0)) s"
