# Call 7 (nvidia-h200-x2, <= 560 s; carry .whl, .calls, kb/level1, kb/level2): the graphs trim (reference gone eager)
# on the six level-1 self-pairs that failed out-of-memory in calls 5-6, then KernelBench level 2 against itself.
#   GPU 0: the six self-pairs (34, 35, 37, 38, 39, 45), then level-2 list A (.calls/l2a.txt).
#   GPU 1: level-2 list B (.calls/l2b.txt).
CALL=c7 DEADLINE=${DEADLINE:-560}
source .calls/setup.sh
mkdir -p /tmp/c7
( kblane 1 l2b 2 "$(cat .calls/l2b.txt)" baseline:self ) > /tmp/c7/gpu1.log 2>&1 &
( for t in 35_GroupNorm_ 37_FrobeniusNorm_ 39_L2Norm_ 45_Average_Pooling_2D 34_InstanceNorm 38_L1Norm_; do kbself $t 75; done
  kblane 0 l2a 2 "$(cat .calls/l2a.txt)" baseline:self
) > /tmp/c7/gpu0.log 2>&1 &
wait
cat /tmp/c7/gpu0.log /tmp/c7/gpu1.log
for f in /tmp/kbs/*.json; do python3 -c "import json; r=json.load(open('$f')); t=r.get('timing') or {}; print('$f', r.get('speedup'), r.get('flags'), r.get('wall_s'), t.get('phases_s'), t.get('trimmed_mib'), t.get('graphs'), t.get('calls_per_round'), (r.get('error') or '')[:1200])" 2>&1 | tail -1; done
cp -r /tmp/kbs /tmp/c7/ 2>/dev/null; rm -f /tmp/c7/kbs/self_*.py
tar -C /tmp -czf "$OUT/c7.tgz" c7; tar -C /tmp -czf "$OUT/c7kb.tgz" --exclude='*/home' kb; ls -la "$OUT"; echo "call 7 ended at $((SECONDS - T0)) s"
