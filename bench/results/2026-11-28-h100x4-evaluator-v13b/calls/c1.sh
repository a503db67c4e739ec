# Call 1 (<= 470 s): GPU 3 the fleet's 1-GPU phase, part 1/2 (foreground); GPU 0 the CUDA red team in full;
# GPU 1 the last 3 benchmark tasks, then the KernelBench softmax / 3-D conv self-pairs (draw-limit fix);
# GPU 2 cold `kernelrl eval` x3 (no spare workers), then KernelBench level 1 with the three baselines (a few tasks).
CALL=c1 DEADLINE=${DEADLINE:-470}
source .calls/setup.sh
mkdir -p /tmp/c1 /tmp/kb
( export CUDA_VISIBLE_DEVICES=0
  t=$SECONDS; KERNELRL_REDTEAM_CLOCK=held timeout 420 python3 -m pytest -q -s -p no:cacheprovider -m gpu \
      tests/redteam/test_redteam_cuda.py > /tmp/c1/redteam_cuda.log 2>&1
  echo "red team rc $? in $((SECONDS - t)) s: $(tail -1 /tmp/c1/redteam_cuda.log)"
) > /tmp/c1/gpu0.log 2>&1 &
( lane 1 c1g1 "$(python3 .calls/todo.py 17,23,29)"
  export CUDA_VISIBLE_DEVICES=1
  kbself 23_Softmax 120
  kbself 54_conv_standard_3D__square_input__square_kernel 100
) > /tmp/c1/gpu1.log 2>&1 &
( export CUDA_VISIBLE_DEVICES=2
  T=kernelrl/tasks/builtin
  for i in 1 2 3; do
    /usr/bin/time -f "cold eval $i: wall %e s" timeout 100 python3 -m kernelrl.cli eval $T/level1/11_ELU.py \
        $T/seeds/level1/11_ELU/functional_elu.py --device cuda --json > /tmp/c1/cold_$i.json
    python3 -c "import json; r=json.load(open('/tmp/c1/cold_$i.json')); t=r['timing']; print(r['speedup'], r['flags'], r['wall_s'], t.get('phases_s'), t.get('eager'))"
  done > /tmp/c1/cold_eval.log 2>&1
  /usr/bin/time -f "readable eval: wall %e s" timeout 100 python3 -m kernelrl.cli eval $T/level1/11_ELU.py \
      $T/seeds/level1/11_ELU/functional_elu.py --device cuda > /tmp/c1/readable_eval.txt 2>&1
  unset CUDA_VISIBLE_DEVICES
  kblane 2 c1kb 1 "$(python3 .calls/kbtasks.py 1 1/20)" baseline:self baseline:cuda-graph baseline:compile baseline:compile-reduce-overhead
) > /tmp/c1/gpu2.log 2>&1 &
timeout $(( $(left) - 25 )) python3 bench/service_bench.py --gpus 3 --only-single --part 1/2 --n 102 \
    --max-extension-seeds 3 --budget-s 0.5 --correctness-trials 5 --reverify --max-minutes 7.0 --work-dir /tmp/sbw1 \
    --out "$OUT/single1.json" > /tmp/c1/single1.log 2>&1
echo "single part 1/2 rc $? at $((SECONDS - T0)) s"; tail -25 /tmp/c1/single1.log
while (( $(jobs -rp | wc -l) > 0 )); do
  (( $(left) < 12 )) && { echo "deadline: stopping what is left"; pkill -f evaluator_bench.py; pkill -f "kernelrl.cli"; pkill -f pytest; sleep 3; break; }
  sleep 3
done
cat /tmp/c1/gpu0.log /tmp/c1/gpu1.log /tmp/c1/gpu2.log /tmp/c1/cold_eval.log; tail -n 12 /tmp/c1/readable_eval.txt
tail -n 4 /tmp/c1/redteam_cuda.log; tail -n 5 /tmp/kb/c1kb.log
cp -r /tmp/kbs /tmp/kb /tmp/ebw /tmp/c1/ 2>/dev/null; rm -rf /tmp/c1/kb/*/home
cp /tmp/c1/redteam_cuda.log "$OUT/"; tar -C /tmp -czf "$OUT/c1.tgz" c1; ls -la "$OUT"; echo "call 1 ended at $((SECONDS - T0)) s"
