# Call 6 (nvidia-h200-x2, <= 520 s; carry .whl, .calls, kb/level1): a5c559e's memory trim on a GPU, then the rest of
# KernelBench level 1 against itself.
#   GPU 0: the trim gpu test; the four self-pairs that failed out-of-memory in call 5 (35, 37, 39, 45); then level-1
#          self-pairs of list A (.calls/l1a.txt: call 5's lanes both ran the odd tasks, the even ones never ran).
#   GPU 1: the CUDA red team in full on this code (the evaluator changed since its last pass), then list B.
CALL=c6 DEADLINE=${DEADLINE:-520}
source .calls/setup.sh
mkdir -p /tmp/c6
( CUDA_VISIBLE_DEVICES=1 KERNELRL_REDTEAM_CLOCK=held timeout 260 python3 -m pytest -q -s -m gpu -p no:cacheprovider \
      tests/redteam/test_redteam_cuda.py > /tmp/c6/redteam_cuda.log 2>&1
  echo "redteam rc $? at $((SECONDS - T0)) s" | tee -a /tmp/c6/redteam_cuda.log
  kblane 1 l1b 1 "$(cat .calls/l1b.txt)" baseline:self ) > /tmp/c6/gpu1.log 2>&1 &
( CUDA_VISIBLE_DEVICES=0 timeout 90 python3 -m pytest -q -s -m gpu -p no:cacheprovider tests/test_devshare.py \
      -k "trim or cached" > /tmp/c6/gpu_tests.log 2>&1
  echo "gpu tests rc $? at $((SECONDS - T0)) s" | tee -a /tmp/c6/gpu_tests.log
  for t in 35_GroupNorm_ 37_FrobeniusNorm_ 39_L2Norm_ 45_Average_Pooling_2D; do kbself $t 75; done
  kblane 0 l1a 1 "$(cat .calls/l1a.txt)" baseline:self
) > /tmp/c6/gpu0.log 2>&1 &
wait
tail -5 /tmp/c6/gpu_tests.log; tail -6 /tmp/c6/redteam_cuda.log; cat /tmp/c6/gpu0.log /tmp/c6/gpu1.log
for f in /tmp/kbs/*.json; do python3 -c "import json; r=json.load(open('$f')); t=r.get('timing') or {}; print('$f', r.get('speedup'), r.get('flags'), r.get('wall_s'), t.get('phases_s'), t.get('trimmed_mib'), t.get('calls_per_round'), (r.get('error') or '')[:300])" 2>&1 | tail -1; done
cp -r /tmp/kbs /tmp/c6/ 2>/dev/null; rm -f /tmp/c6/kbs/self_*.py
tar -C /tmp -czf "$OUT/c6.tgz" c6; tar -C /tmp -czf "$OUT/c6kb.tgz" --exclude='*/home' kb; ls -la "$OUT"; echo "call 6 ended at $((SECONDS - T0)) s"
