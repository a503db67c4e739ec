# Call 4 (nvidia-h200-x2, <= 330 s): the device-side comparison again after the handle fix (call 3: a c_char array
# read as bytes cut at the first NUL, so every mapping failed as "malformed handle" and fell back to the host).
#   GPU 0: the gpu-marked tests of tests/test_devshare.py and tests/test_worker_inputs.py; the KernelBench self-pairs
#          with 6.4 GB outputs (softmax, sigmoid) and the 3-D conv through `kernelrl eval`.
#   GPU 1: KernelBench level 1 (odd tasks: square, batched, small-K matmuls first) against itself and the baselines.
CALL=c4 DEADLINE=${DEADLINE:-330}
source .calls/setup.sh
mkdir -p /tmp/c4
SRC="baseline:self baseline:cuda-graph baseline:compile baseline:compile-reduce-overhead"
( kblane 1 l1odd 1 "$(python3 .calls/kbtasks.py 1 1/2 21_Sigmoid,23_Softmax)" $SRC ) > /tmp/c4/gpu1.log 2>&1 &
( CUDA_VISIBLE_DEVICES=0 timeout 100 python3 -m pytest -q -s -m gpu -p no:cacheprovider tests/test_devshare.py \
      tests/test_worker_inputs.py > /tmp/c4/gpu_tests.log 2>&1
  echo "gpu tests rc $? at $((SECONDS - T0)) s" | tee -a /tmp/c4/gpu_tests.log
  ( sleep 45; spydump softmax45 ) & kbself 23_Softmax 90; wait
  kbself 21_Sigmoid 70
  l=$(left); (( l > 30 )) && kbself 54_conv_standard_3D__square_input__square_kernel $(( l - 10 ))
) > /tmp/c4/gpu0.log 2>&1 &
wait
grep -E "passed|failed|FAILED|^E " /tmp/c4/gpu_tests.log | head -20; cat /tmp/c4/gpu0.log /tmp/c4/gpu1.log
for f in /tmp/kbs/*.json; do python3 -c "import json; r=json.load(open('$f')); t=r.get('timing') or {}; print('$f', r.get('speedup'), r.get('flags'), r.get('wall_s'), t.get('phases_s'), t.get('correctness_split_s'), t.get('device_compare'))" 2>&1 | tail -1; done
grep -h "^the reference" /tmp/kb/l1odd/report/tasks.csv 2>/dev/null | cut -d, -f3,7,10,11,21 | head -30
cp -r /tmp/kbs /tmp/spy /tmp/c4/ 2>/dev/null; rm -f /tmp/c4/kbs/self_*.py
tar -C /tmp -czf "$OUT/c4.tgz" c4; tar -C /tmp -czf "$OUT/c4kb.tgz" --exclude='*/home' kb; ls -la "$OUT"; echo "call 4 ended at $((SECONDS - T0)) s"
