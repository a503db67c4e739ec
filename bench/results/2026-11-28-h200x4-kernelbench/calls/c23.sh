# Call 23 (2026-11-29, one nvidia-h200, <= 580 s): the torch.compile baselines over level 1, both modes, task by
# task, from where c22 stopped (c22's lane report in .calls/done/c22-l1c22.json). Prepare as
# ../../2026-11-28-h200x4-kernelbench/calls/c9.sh's header says; carry [".whl", ".calls", "kb/level1"].
# Run: bash .calls/c23.sh 2>&1 | tee $OUT/c23.log
CALL=${CALL:-c23} DEADLINE=${DEADLINE:-560}
source .calls/setup.sh
kblane 0 l1c23 1 "$(python3 .calls/todo.py 1 1/1 "torch.compile,torch.compile reduce-overhead" .calls/done/*.json)" \
    baseline:compile baseline:compile-reduce-overhead
grep -v "kernels scored" /tmp/kb/l1c23.log | grep "\[" | cut -c1-400 | tail -40
tar -C /tmp -czf "$OUT/${CALL}kb.tgz" --exclude='*/home' kb; ls -la "$OUT"; echo "call $CALL ended at $((SECONDS - T0)) s"
