# Call 4 (if the budget allows): the GPU seeds (indices 0-11; 8 build extensions) on four lanes after a prebuild.
CALL=c4 DEADLINE=${DEADLINE:-330}
source .calls/setup.sh
mkdir -p /tmp/c4
timeout 150 python3 bench/evaluator_bench.py --device cuda --out-dir /tmp/prebuild --prebuild-only > /tmp/c4/prebuild.log 2>&1
echo "prebuild rc $? at $((SECONDS - T0)) s"
( lane 0 c4g0 "$(python3 .calls/todo.py 0,1,2)" ) > /tmp/c4/g0.log 2>&1 &
( lane 1 c4g1 "$(python3 .calls/todo.py 3,4,5)" ) > /tmp/c4/g1.log 2>&1 &
( lane 2 c4g2 "$(python3 .calls/todo.py 6,7,8)" ) > /tmp/c4/g2.log 2>&1 &
( lane 3 c4g3 "$(python3 .calls/todo.py 9,10,11)" ) > /tmp/c4/g3.log 2>&1 &
wait; cat /tmp/c4/*.log | tail -20
cp -r /tmp/ebw /tmp/c4/ 2>/dev/null; tar -C /tmp -czf "$OUT/c4.tgz" c4; ls -la "$OUT"; echo "call 4 ended at $((SECONDS - T0)) s"
