# Call 2 (<= 480 s): the fleet's 1-GPU phase as three parts at once (GPUs 1, 2, 3; each its own store and worker);
# GPU 0: the KernelBench softmax self-pair with stack dumps (where the big-output evaluation spends its time),
# then KernelBench level 1 self-pairs.
CALL=c2 DEADLINE=${DEADLINE:-470}
source .calls/setup.sh
mkdir -p /tmp/c2 /tmp/kb
MM=$(python3 -c "print(round(min(6.6, ($(left) - 45) / 60), 2))")
for k in 1 2 3; do
  ( timeout $(python3 -c "print(int($MM * 60 + 40))") python3 bench/service_bench.py --gpus $k --only-single --part $k/3 \
      --n 102 --max-extension-seeds 3 --budget-s 0.5 --correctness-trials 5 --reverify --max-minutes $MM \
      --work-dir /tmp/sbw$k --out "$OUT/single$k.json" > /tmp/c2/single$k.log 2>&1
    echo "single part $k/3 (cuda:$k) rc $? at $((SECONDS - T0)) s" ) &
done
( export CUDA_VISIBLE_DEVICES=0
  ( sleep 50; spydump softmax50; sleep 60; spydump softmax110 ) &
  kbself 23_Softmax 170
  wait
  unset CUDA_VISIBLE_DEVICES
  kblane 0 c2kb 1 "$(python3 .calls/kbtasks.py 1 2/4 21_Sigmoid,23_Softmax)" baseline:self
) > /tmp/c2/gpu0.log 2>&1 &
while (( $(jobs -rp | wc -l) > 0 )); do
  (( $(left) < 12 )) && { echo "deadline: stopping what is left"; spydump deadline; pkill -f service_bench.py; pkill -f "kernelrl.cli"; sleep 3; break; }
  sleep 3
done
for k in 1 2 3; do tail -n 14 /tmp/c2/single$k.log; done
cat /tmp/c2/gpu0.log; cat /tmp/kbs/23_Softmax.err | tail -n 5; tail -n 8 /tmp/kb/c2kb.log
for k in 1 2 3; do cp /tmp/sbw$k/*.log /tmp/c2/ 2>/dev/null; mkdir -p /tmp/c2/w$k; cp /tmp/sbw$k/*.log /tmp/c2/w$k/ 2>/dev/null; done
cp -r /tmp/kbs /tmp/kb /tmp/spy /tmp/c2/ 2>/dev/null; rm -rf /tmp/c2/kb/*/home
tar -C /tmp -czf "$OUT/c2.tgz" c2; ls -la "$OUT"; echo "call 2 ended at $((SECONDS - T0)) s"
