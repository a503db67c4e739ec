# Call 2 (nvidia-h200-x2, <= 440 s).
#   GPU 1: the MoE task with v11 code (210291d) given 150 s (call 1's 95 s was too short: v11 writes its row only when
#          all repeats and the long run are done, ~13 s an evaluation), then v13 code, then v11 again (ABA).
#   GPU 0: issue 32's CPU changes, first time on a GPU: the cold command three times (candidate warm-up overlapped
#          with the reference's load, 52dc9d1); KernelBench self-pairs with gigabyte outputs (softmax, sigmoid, 3-D
#          conv) with replies through memfd and threaded comparison (c8078ac), py-spy dumps of the softmax.
CALL=c2 DEADLINE=${DEADLINE:-440}
source .calls/setup.sh
mkdir -p /tmp/c2
( run_moe() {  # run_moe VERSION ROUND TIMEOUT
    local d=$ROOT; [ "$1" = v11 ] && d=$ROOT/.calls/v11
    ( cd "$d" && PYTHONPATH="$d" KERNELRL_HOME=/tmp/krl-$1 timeout "$3" python3 bench/evaluator_bench.py --device cuda:1 \
        --out-dir /tmp/c2/moe-$1-$2 --no-prebuild --only 31 --repeats 5 --long-factor 10 --clock held \
        --max-wall-s 60 --max-minutes 1.2 > /tmp/c2/moe-$1-$2.log 2>&1 )
    echo "moe $1 round $2 rc $? at $((SECONDS - T0)) s"; grep -h MoE /tmp/c2/moe-$1-$2/table.md 2>/dev/null
  }
  run_moe v11 1 150; run_moe cur 1 95; run_moe v11 2 150 ) 2>&1 | tee /tmp/c2/moe.log &
( T=kernelrl/tasks/builtin
  for i in 1 2 3; do
    /usr/bin/time -f "cold eval $i: wall %e s" timeout 60 python3 -m kernelrl.cli eval $T/level1/11_ELU.py \
        $T/seeds/level1/11_ELU/functional_elu.py --device cuda --json > /tmp/c2/cold_$i.json
    python3 -c "import json; r=json.load(open('/tmp/c2/cold_$i.json')); t=r['timing']; print(r['speedup'], r['flags'], r['wall_s'], t.get('phases_s'))"
  done > /tmp/c2/cold_eval.log 2>&1
  ( sleep 40; spydump softmax40; sleep 50; spydump softmax90 ) & kbself 23_Softmax 150; wait
  l=$(left); (( l > 60 )) && kbself 21_Sigmoid $(( l - 40 > 100 ? 100 : l - 40 ))
  l=$(left); (( l > 50 )) && kbself 54_conv_standard_3D__square_input__square_kernel $(( l - 25 ))
) > /tmp/c2/gpu0.log 2>&1 &
wait
cat /tmp/c2/cold_eval.log /tmp/c2/gpu0.log
for f in /tmp/kbs/*.json; do python3 -c "import json; r=json.load(open('$f')); t=r.get('timing') or {}; print('$f', r.get('speedup'), r.get('flags'), r.get('wall_s'), t.get('phases_s'), t.get('correctness_split_s'), t.get('correctness_trials_run'))" 2>&1 | tail -1; done
cp -r /tmp/kbs /tmp/spy /tmp/c2/ 2>/dev/null; tar -C /tmp -czf "$OUT/c2.tgz" c2; ls -la "$OUT"; echo "call 2 ended at $((SECONDS - T0)) s"
