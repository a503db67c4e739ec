# Call 3: the fleet's 3-GPU phase over the same batch (GPUs 1-3), and a benchmark lane on GPU 0 for what is left.
CALL=${CALL:-c3} DEADLINE=${DEADLINE:-560}
source .calls/setup.sh
mkdir -p /tmp/c3
rm -rf /tmp/sbw3 && mkdir -p /tmp/sbw3
( lane 0 c3g0 "$(python3 .calls/todo.py 0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,32,33,34,31)" ) > /tmp/c3/g0.log 2>&1 &
timeout $(( $(left) - 20 )) python3 bench/service_bench.py --gpus 1,2,3 --skip-single --n 102 --max-extension-seeds 3 \
    --budget-s 0.5 --correctness-trials 5 --reverify --max-minutes 7.2 --work-dir /tmp/sbw3 --out "$OUT/multi.json" \
    > /tmp/c3/multi.log 2>&1
echo "multi phase rc $? at $((SECONDS - T0)) s"; tail -30 /tmp/c3/multi.log
pkill -f evaluator_bench.py; sleep 4; cat /tmp/c3/g0.log; tail -4 /tmp/ebw/c3g0.log 2>/dev/null
cp -r /tmp/ebw /tmp/c3/ 2>/dev/null; tar -C /tmp -czf "$OUT/c3.tgz" c3
ls -la "$OUT"; echo "call 3 ended at $((SECONDS - T0)) s"
