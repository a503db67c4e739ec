# Call 1 (~570 s): GPU 3 the fleet's 1-GPU phase (background, from a copy, ~14 min); GPU 0 the CUDA red team on v13,
# a cold `kernelrl eval` twice, KernelBench self-pairs; GPUs 1,2 the DP re-run (NCCL), then benchmark lanes.
CALL=c1 DEADLINE=${DEADLINE:-565}
source .calls/setup.sh
rm -rf /tmp/sbcode /tmp/sbw && mkdir -p /tmp/sbcode /tmp/sbw /tmp/c1
cp -r kernelrl bench flows steps recipes pyproject.toml /tmp/sbcode/
( cd /tmp/sbcode && PYTHONPATH=/tmp/sbcode setsid nohup python3 bench/service_bench.py --gpus 3 --only-single --n 102 \
    --max-extension-seeds 3 --budget-s 0.5 --correctness-trials 5 --reverify --max-minutes 17 --work-dir /tmp/sbw \
    --out /tmp/sbw/single.json > /tmp/sbw/single.log 2>&1 < /dev/null & echo $! > /tmp/sbw/single.pid )
( timeout 300 python3 bench/evaluator_bench.py --device cuda --out-dir /tmp/prebuild --prebuild-only > /tmp/c1/prebuild.log 2>&1
  echo "prebuild rc $? at $((SECONDS - T0)) s" >> /tmp/c1/prebuild.log ) &
echo "single phase started: pid $(cat /tmp/sbw/single.pid) at $((SECONDS - T0)) s"
( export CUDA_VISIBLE_DEVICES=0
  t=$SECONDS; KERNELRL_REDTEAM_CLOCK=held timeout 300 python3 -m pytest -q -s -p no:cacheprovider -m gpu \
      tests/redteam/test_redteam_cuda.py > "$OUT/redteam_cuda.log" 2>&1
  echo "red team rc $? in $((SECONDS - t)) s: $(tail -1 "$OUT/redteam_cuda.log")"
  T=kernelrl/tasks/builtin
  for i in 1 2 3; do
    /usr/bin/time -f "cold eval $i: wall %e s" timeout 120 python3 -m kernelrl.cli eval $T/level1/11_ELU.py \
        $T/seeds/level1/11_ELU/functional_elu.py --device cuda --json > /tmp/c1/cold_$i.json
    python3 -c "import json; r=json.load(open('/tmp/c1/cold_$i.json')); t=r['timing']; print(r['speedup'], r['flags'], r['wall_s'], t.get('phases_s'), t.get('reverify_speedup'))"
  done > /tmp/c1/cold_eval.log 2>&1; cat /tmp/c1/cold_eval.log
  kbself 23_Softmax 150
  kbself 54_conv_standard_3D__square_input__square_kernel 130
) > /tmp/c1/gpu0.log 2>&1 &
P0=$!
( t=$SECONDS; cp -r .dpnoise /tmp/dph
  timeout 260 python3 bench/dp_noise.py run --home /tmp/dph --seeds 1,2,3 --out /tmp/c1/dp --timeout-s 100 --gpus 1,2 \
      > /tmp/c1/dp.log 2>&1
  echo "dp_noise rc $? in $((SECONDS - t)) s"
  ( ( export CUDA_VISIBLE_DEVICES=1; kbself 95_CrossEntropyLoss 130; kbself 1_Square_matrix_multiplication_ 90 )
    lane 1 c1g1 18,19,20 ) &
  lane 2 c1g2 12,13,14,15,16,17; wait
) > /tmp/c1/gpu12.log 2>&1 &
P12=$!
while kill -0 $P0 2>/dev/null || kill -0 $P12 2>/dev/null; do
  (( $(left) < 12 )) && { echo "deadline: stopping what is left"; pkill -f evaluator_bench.py; pkill -f "kernelrl.cli eval"; pkill -f pytest; sleep 3; break; }
  sleep 5
done
cat /tmp/c1/gpu0.log /tmp/c1/gpu12.log
grep -E "^\{|loss|step 160" /tmp/c1/dp.log | tail -30
tail -3 /tmp/sbw/single.log; nvidia-smi --query-gpu=index,utilization.gpu,memory.used --format=csv
cp -r /tmp/kbs /tmp/c1/ 2>/dev/null; cp -r /tmp/ebw /tmp/c1/ 2>/dev/null
tar -C /tmp -czf "$OUT/c1.tgz" c1; ls -la "$OUT"; echo "call 1 ended at $((SECONDS - T0)) s"
