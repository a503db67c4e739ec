# Call 9 (next session; nvidia-h200-x4 or nvidia-h100-x4, <= 540 s), written, not run. Prepare as for c5 (see c5.sh's
# header: site, py-spy, kb link, .calls/setup.sh), then: cp this folder's *.txt lists to .calls/, and
# cp refvar.py.txt .calls/refvar.py; carry [".whl", ".calls", "kb/level1", "kb/level2", "kb/level3"].
#   GPU 0: a9bac86's gpu test (replayed blocks drawn into their graphs' buffers); 45_Average_Pooling_2D against
#          itself (the last OOM); the reference-variation probe on 77_ConvTranspose3d (refvar.py) and its
#          self-pair twice through `kernelrl eval` (06e140d's diagnosis on a wrong output); then the
#          level-1 self-pairs never reached (l1rest.txt) and level 2's 100.
#   GPU 1: the CUDA red team in full at this code; then level-3 self-pairs, list A.
#   GPU 2, GPU 3: level-3 self-pairs, lists B and C.
CALL=c9 DEADLINE=${DEADLINE:-540}
source .calls/setup.sh
mkdir -p /tmp/c9
( CUDA_VISIBLE_DEVICES=1 KERNELRL_REDTEAM_CLOCK=held timeout 260 python3 -m pytest -q -s -m gpu -p no:cacheprovider \
      tests/redteam/test_redteam_cuda.py > /tmp/c9/redteam_cuda.log 2>&1
  echo "redteam rc $? at $((SECONDS - T0)) s" | tee -a /tmp/c9/redteam_cuda.log
  kblane 1 l3a 3 "$(cat .calls/l3a.txt)" baseline:self ) > /tmp/c9/gpu1.log 2>&1 &
( kblane 2 l3b 3 "$(cat .calls/l3b.txt)" baseline:self ) > /tmp/c9/gpu2.log 2>&1 &
( kblane 3 l3c 3 "$(cat .calls/l3c.txt)" baseline:self ) > /tmp/c9/gpu3.log 2>&1 &
( CUDA_VISIBLE_DEVICES=0 timeout 60 python3 -m pytest -q -s -m gpu -p no:cacheprovider tests/test_worker_inputs.py \
      > /tmp/c9/gpu_tests.log 2>&1
  echo "gpu tests rc $? at $((SECONDS - T0)) s" | tee -a /tmp/c9/gpu_tests.log
  kbself 45_Average_Pooling_2D 75
  CUDA_VISIBLE_DEVICES=0 timeout 150 python3 .calls/refvar.py kb/level2/77_ConvTranspose3d_Scale_BatchNorm_GlobalAvgPool.py \
      > /tmp/c9/refvar77.log 2>&1; echo "refvar rc $? at $((SECONDS - T0)) s"
  # the same task through the evaluator, twice: a wrong-output now carries timing.reference_variation (06e140d)
  f=kb/level2/77_ConvTranspose3d_Scale_BatchNorm_GlobalAvgPool.py; c=/tmp/kbs/self_77.py
  { cat $f; printf '\n\nclass ModelNew(Model):\n    pass\n'; } > $c
  for i in 1 2; do CUDA_VISIBLE_DEVICES=0 timeout 90 python3 -m kernelrl.cli eval $f $c --device cuda --json \
      > /tmp/kbs/77_self_$i.json 2> /tmp/kbs/77_self_$i.err; echo "77 self $i rc $? at $((SECONDS - T0)) s"; done
  kblane 0 l1rest 1 "$(cat .calls/l1rest.txt)" baseline:self
  kblane 0 l2rest 2 100_ConvTranspose3d_Clamp_Min_Divide baseline:self
) > /tmp/c9/gpu0.log 2>&1 &
wait
tail -3 /tmp/c9/gpu_tests.log; tail -4 /tmp/c9/redteam_cuda.log; cat /tmp/c9/refvar77.log /tmp/c9/gpu*.log
for f in /tmp/kbs/*.json; do python3 -c "import json; r=json.load(open('$f')); t=r.get('timing') or {}; print('$f', r.get('speedup'), r.get('flags'), r.get('wall_s'), t.get('phases_s'), t.get('trimmed_mib'), t.get('graphs'), t.get('reference_variation'), (r.get('error') or '')[:1200])" 2>&1 | tail -1; done
cp -r /tmp/kbs /tmp/c9/ 2>/dev/null; rm -f /tmp/c9/kbs/self_*.py
tar -C /tmp -czf "$OUT/c9.tgz" c9; tar -C /tmp -czf "$OUT/c9kb.tgz" --exclude='*/home' kb; ls -la "$OUT"; echo "call 9 ended at $((SECONDS - T0)) s"
