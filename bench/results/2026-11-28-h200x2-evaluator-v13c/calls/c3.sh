# Call 3 (nvidia-h200-x2, <= 450 s): the device-side comparison (devshare.py, worker_share.py) and the input template
# drawn on the GPU (baab04e), first time on a GPU.
#   GPU 0: the gpu-marked tests of both (tests/test_devshare.py, tests/test_worker_inputs.py); the KernelBench
#          self-pairs with 6.4 GB outputs (softmax, sigmoid) and the 3-D conv through `kernelrl eval`, py-spy at 60 s;
#          then KernelBench level 1 (even tasks) against itself and the three baselines until the deadline.
#   GPU 1: the CUDA red team in full on this code, then level 1 (odd tasks) the same way.
CALL=c3 DEADLINE=${DEADLINE:-450}
source .calls/setup.sh
mkdir -p /tmp/c3
SRC="baseline:self baseline:cuda-graph baseline:compile baseline:compile-reduce-overhead"
( CUDA_VISIBLE_DEVICES=1 KERNELRL_REDTEAM_CLOCK=held timeout 300 python3 -m pytest -q -s -m gpu -p no:cacheprovider \
      tests/redteam/test_redteam_cuda.py > /tmp/c3/redteam_cuda.log 2>&1
  echo "redteam rc $? at $((SECONDS - T0)) s" | tee -a /tmp/c3/redteam_cuda.log
  kblane 1 l1odd 1 "$(python3 .calls/kbtasks.py 1 1/2 21_Sigmoid,23_Softmax)" $SRC ) > /tmp/c3/gpu1.log 2>&1 &
( CUDA_VISIBLE_DEVICES=0 timeout 150 python3 -m pytest -q -s -m gpu -p no:cacheprovider tests/test_devshare.py \
      tests/test_worker_inputs.py > /tmp/c3/gpu_tests.log 2>&1
  echo "gpu tests rc $? at $((SECONDS - T0)) s" | tee -a /tmp/c3/gpu_tests.log
  ( sleep 60; spydump softmax60 ) & kbself 23_Softmax 100; wait
  kbself 21_Sigmoid 80
  kbself 54_conv_standard_3D__square_input__square_kernel 80
  kblane 0 l1even 1 "$(python3 .calls/kbtasks.py 1 2/2 21_Sigmoid,23_Softmax,54_conv_standard_3D__square_input__square_kernel)" $SRC
) > /tmp/c3/gpu0.log 2>&1 &
wait
cat /tmp/c3/gpu_tests.log | tail -15; tail -4 /tmp/c3/redteam_cuda.log; cat /tmp/c3/gpu0.log /tmp/c3/gpu1.log
for f in /tmp/kbs/*.json; do python3 -c "import json; r=json.load(open('$f')); t=r.get('timing') or {}; print('$f', r.get('speedup'), r.get('flags'), r.get('wall_s'), t.get('phases_s'), t.get('correctness_split_s'), t.get('device_compare'))" 2>&1 | tail -1; done
for l in l1odd l1even; do grep -h "speedup\|Error" /tmp/kb/$l.log | tail -30; done
cp -r /tmp/kbs /tmp/spy /tmp/c3/ 2>/dev/null; rm -f /tmp/c3/kbs/self_*.py
tar -C /tmp -czf "$OUT/c3.tgz" c3; tar -C /tmp -czf "$OUT/c3kb.tgz" --exclude='*/home' kb; ls -la "$OUT"; echo "call 3 ended at $((SECONDS - T0)) s"
