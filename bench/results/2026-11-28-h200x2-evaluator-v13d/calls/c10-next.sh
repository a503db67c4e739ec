# Call 10 (next session, after c9-next.sh; nvidia-h200-x4 or nvidia-h100-x4, <= 540 s), written, not run: the paper's
# three baselines over KernelBench level 1, one quarter of the tasks per GPU (one `kernelrl bench` per GPU, its own
# store). Prepare as c9-next.sh says; kbtasks.py lists kb/level1 at call time, so nothing may be copied into kb/
# before it (call 5's lanes overlapped because of that). A lane's report is partial when --max-minutes ends it:
# run this again with the finished tasks skipped (kbtasks.py takes names to skip), then merge every report.json
# with bench/kernelbench_summary.py (later over earlier).
CALL=c10 DEADLINE=${DEADLINE:-540}
source .calls/setup.sh
SRC="baseline:cuda-graph baseline:compile baseline:compile-reduce-overhead"
for g in 0 1 2 3; do
  ( kblane $g l1base$g 1 "$(python3 .calls/kbtasks.py 1 $((g + 1))/4 ${SKIP:-})" $SRC ) > /tmp/gpu$g.log 2>&1 &
done
wait
cat /tmp/gpu*.log; for g in 0 1 2 3; do grep -v "kernels scored" /tmp/kb/l1base$g.log | grep "\[" | tail -3; done
tar -C /tmp -czf "$OUT/c10kb.tgz" --exclude='*/home' kb; ls -la "$OUT"; echo "call 10 ended at $((SECONDS - T0)) s"
