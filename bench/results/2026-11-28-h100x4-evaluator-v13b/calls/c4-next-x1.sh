# Call 4 (nvidia-h100-x1, <= 225 s): the MoE benchmark task alone on an x1 host, as v11 ran it (issue 34 item 5's
# one outlier); then, side by side on the same GPU, the cold command twice (candidate warm-up overlap, 52dc9d1)
# and the KernelBench softmax / 3-D conv self-pairs with outputs through memfd (the helper's branch).
CALL=c4 DEADLINE=${DEADLINE:-225}
source .calls/setup.sh
mkdir -p /tmp/c4
mkdir -p /tmp/ebw
timeout 95 python3 bench/evaluator_bench.py --device cuda:0 --out-dir /tmp/ebw/c4moe --no-prebuild --only 31 \
    --repeats 5 --long-factor 10 --max-wall-s 60 --max-minutes 1.3 > /tmp/ebw/c4moe.log 2>&1
echo "MoE lane rc $? at $((SECONDS - T0)) s"; grep -E "MoE|repeatab|over_claim" /tmp/ebw/c4moe/table.md /tmp/ebw/c4moe/summary.json 2>/dev/null | head -8
( T=kernelrl/tasks/builtin
  for i in 1 2; do
    /usr/bin/time -f "cold eval $i: wall %e s" timeout 60 python3 -m kernelrl.cli eval $T/level1/11_ELU.py \
        $T/seeds/level1/11_ELU/functional_elu.py --device cuda --json > /tmp/c4/cold_$i.json
    python3 -c "import json; r=json.load(open('/tmp/c4/cold_$i.json')); t=r['timing']; print(r['speedup'], r['flags'], r['wall_s'], t.get('phases_s'))"
  done ) > /tmp/c4/cold_eval.log 2>&1 &
( ( sleep 45; spydump softmax45 ) & kbself 23_Softmax $(( $(left) - 50 > 100 ? 100 : $(left) - 50 )); wait
  l=$(left); (( l > 40 )) && kbself 54_conv_standard_3D__square_input__square_kernel $(( l - 15 )) ) > /tmp/c4/kb.log 2>&1 &
wait
cat /tmp/c4/cold_eval.log /tmp/c4/kb.log
for f in /tmp/kbs/*.json; do python3 -c "import json; r=json.load(open('$f')); t=r.get('timing') or {}; print('$f', r.get('speedup'), r.get('flags'), r.get('wall_s'), t.get('phases_s'), t.get('correctness_split_s'), t.get('correctness_trials_run'))" 2>&1 | tail -1; done
cp -r /tmp/kbs /tmp/ebw /tmp/spy /tmp/c4/ 2>/dev/null; tar -C /tmp -czf "$OUT/c4.tgz" c4; ls -la "$OUT"; echo "call 4 ended at $((SECONDS - T0)) s"
