# Call 5 (next session; nvidia-h200-x2 or nvidia-h100-x2, <= 450 s; carry .whl, .calls, kb/level1, kb/level3), written, not run: the device-side comparison
# with f5ce0f2's fixes, then KernelBench level 1 in two lanes.
#   GPU 0: gpu tests of the device path (cross-uid mapping, 128 MiB softmax evaluations right, wrong, one element off,
#          a candidate refusing export); the three gigabyte self-pairs through `kernelrl eval` (py-spy at 30 s);
#          then level 1 (even tasks) against itself and the three baselines.
#   GPU 1: level 1 (odd tasks) the same way (call 4's lane was spoiled by the read-only flag: rerun it whole).
# If the gpu tests fail, stop after them on GPU 0 and read raw/c5/gpu_tests.log before spending more.
# Before the call, here: bash bench/gpu_site.sh (-> .whl/site.tar.xz); py-spy's binary to .whl/py-spy (pip download
#   py-spy, unzip, strip); ln -sfn ../shared/kernelbench kb; add kb and .calls to .git/info/exclude;
#   mkdir .calls && cp ../../2026-11-28-h100x4-fleet/calls/setup.sh .calls/ (paths from bench/results/...: see
#   bench/results/2026-11-28-h100x4-fleet/calls/) && cp .../fleet/calls/kbtasks.py.txt .calls/kbtasks.py;
#   cp this file .calls/c5.sh; run `bash .calls/c5.sh` with carry [".whl", ".calls", "kb/level1", "kb/level3"].
CALL=c5 DEADLINE=${DEADLINE:-450}
source .calls/setup.sh
mkdir -p /tmp/c5
SRC="baseline:self baseline:cuda-graph baseline:compile baseline:compile-reduce-overhead"
( kblane 1 l1odd 1 "$(python3 .calls/kbtasks.py 1 1/2 21_Sigmoid,23_Softmax)" $SRC ) > /tmp/c5/gpu1.log 2>&1 &
( CUDA_VISIBLE_DEVICES=0 timeout 120 python3 -m pytest -q -s -m gpu -p no:cacheprovider tests/test_devshare.py \
      tests/test_worker_inputs.py > /tmp/c5/gpu_tests.log 2>&1
  rc=$?; echo "gpu tests rc $rc at $((SECONDS - T0)) s" | tee -a /tmp/c5/gpu_tests.log
  if [ $rc -eq 0 ]; then
    ( sleep 30; spydump softmax30 ) & kbself 23_Softmax 90; wait
    kbself 21_Sigmoid 60
    kbself 54_conv_standard_3D__square_input__square_kernel 60
    # 8 GiB of weights: compared by exact prints, nothing shipped for a self-pair (timing.state_tensors_shipped 0)
    cp kb/level3/2_ShallowWideMLP.py kb/level1/  # kbself reads kb/level1 (a carried copy on the device)
    kbself 2_ShallowWideMLP 60
    kblane 0 l1even 1 "$(python3 .calls/kbtasks.py 1 2/2 21_Sigmoid,23_Softmax,54_conv_standard_3D__square_input__square_kernel)" $SRC
  fi
) > /tmp/c5/gpu0.log 2>&1 &
wait
grep -E "passed|failed|FAILED|^E " /tmp/c5/gpu_tests.log | head -20; cat /tmp/c5/gpu0.log /tmp/c5/gpu1.log
for f in /tmp/kbs/*.json; do python3 -c "import json; r=json.load(open('$f')); t=r.get('timing') or {}; print('$f', r.get('speedup'), r.get('flags'), r.get('wall_s'), t.get('phases_s'), t.get('correctness_split_s'), t.get('device_compare'), (r.get('error') or '')[:300])" 2>&1 | tail -1; done
cp -r /tmp/kbs /tmp/spy /tmp/c5/ 2>/dev/null; rm -f /tmp/c5/kbs/self_*.py
tar -C /tmp -czf "$OUT/c5.tgz" c5; tar -C /tmp -czf "$OUT/c5kb.tgz" --exclude='*/home' kb; ls -la "$OUT"; echo "call 5 ended at $((SECONDS - T0)) s"
