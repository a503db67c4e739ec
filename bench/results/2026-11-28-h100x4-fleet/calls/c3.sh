# Call 3 (<= 480 s): the fleet's 3-GPU phase over the same batch (GPUs 1-3, one store), with the forced
# re-verification on another GPU; GPU 0: KernelBench level 1 self-pairs (small and mid-size tasks).
CALL=c3 DEADLINE=${DEADLINE:-475}
source .calls/setup.sh
mkdir -p /tmp/c3 /tmp/kb
( kblane 0 c3kb 1 "$(python3 .calls/kbtasks.py 1 3/4 21_Sigmoid,23_Softmax)" baseline:self ) > /tmp/c3/gpu0.log 2>&1 &
timeout 455 python3 bench/service_bench.py --gpus 1,2,3 --skip-single --n 102 --max-extension-seeds 3 \
    --budget-s 0.5 --correctness-trials 5 --reverify --max-minutes 7.25 --work-dir /tmp/sbwm --out "$OUT/multi.json" \
    > /tmp/c3/multi.log 2>&1
echo "multi phase rc $? at $((SECONDS - T0)) s"; tail -n 30 /tmp/c3/multi.log
while (( $(jobs -rp | wc -l) > 0 )); do
  (( $(left) < 10 )) && { echo "deadline: stopping what is left"; pkill -f "kernelrl.cli"; sleep 3; break; }
  sleep 3
done
cat /tmp/c3/gpu0.log; tail -n 6 /tmp/kb/c3kb.log
cp /tmp/sbwm/*.log /tmp/c3/ 2>/dev/null; cp -r /tmp/kb /tmp/c3/ 2>/dev/null; rm -rf /tmp/c3/kb/*/home
tar -C /tmp -czf "$OUT/c3.tgz" c3; ls -la "$OUT"; echo "call 3 ended at $((SECONDS - T0)) s"
