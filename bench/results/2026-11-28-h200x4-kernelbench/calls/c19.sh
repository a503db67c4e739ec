# Call 19 (nvidia-h200, one GPU, <= 540 s): the paper's torch.compile baselines (default and reduce-overhead) over
# level 1, as far as the time goes, one lane on GPU 0 (c14-next.sh's lane, one part instead of four).
CALL=${CALL:-c19} DEADLINE=${DEADLINE:-520}
source .calls/setup.sh
LVL=${LVL:-1}
kblane 0 l${LVL}c19 $LVL "$(python3 .calls/todo.py $LVL 1/1 "torch.compile,torch.compile reduce-overhead" .calls/done/*.json)" \
    baseline:compile baseline:compile-reduce-overhead
grep -v "kernels scored" /tmp/kb/l${LVL}c19.log | grep "\[" | tail -40
tar -C /tmp -czf "$OUT/${CALL}kb.tgz" --exclude='*/home' kb; ls -la "$OUT"; echo "call $CALL ended at $((SECONDS - T0)) s"
