# Call 2 (at once after call 1): benchmark lanes on GPUs 0-2 while the 1-GPU phase finishes; collect it. On a fresh
# machine (the single phase lost) run call 3's multi phase instead, so the call is not wasted.
CALL=c2 DEADLINE=${DEADLINE:-560}
source .calls/setup.sh
if ! kill -0 "$(cat /tmp/sbw/single.pid 2>/dev/null || echo 0)" 2>/dev/null && [ ! -f /tmp/sbw/single.json ]; then
  echo "FRESH MACHINE: the single phase is gone; running call 3 instead"; CALL=c2asc3 bash .calls/c3.sh; exit; fi
mkdir -p /tmp/c2
( lane 0 c2g0 "$(python3 .calls/todo.py 0,1,2,3,4,5,21,22)" ) > /tmp/c2/g0.log 2>&1 &
( lane 1 c2g1 "$(python3 .calls/todo.py 6,7,8,9,10,11,23,24)" ) > /tmp/c2/g1.log 2>&1 &
( lane 2 c2g2 "$(python3 .calls/todo.py 25,26,27,28,29,30,32,33,34,31)" ) > /tmp/c2/g2.log 2>&1 &
last=0
while kill -0 "$(cat /tmp/sbw/single.pid)" 2>/dev/null && (( $(left) > 25 )); do
  (( SECONDS - last >= 60 )) && { last=$SECONDS; echo "[$((SECONDS - T0)) s] $(tail -1 /tmp/sbw/single.log | cut -c1-160)"; }
  sleep 3
done
echo "single phase: $(kill -0 "$(cat /tmp/sbw/single.pid)" 2>/dev/null && echo STILL RUNNING || echo ended) at $((SECONDS - T0)) s"
pkill -f evaluator_bench.py; sleep 4
cat /tmp/c2/*.log; for f in /tmp/ebw/c2*.log; do echo "== $f"; tail -4 "$f"; done
tail -40 /tmp/sbw/single.log
cp /tmp/sbw/single.json /tmp/sbw/single.log "$OUT/" 2>/dev/null
cp -r /tmp/ebw /tmp/c2/ 2>/dev/null; tar -C /tmp -czf "$OUT/c2.tgz" c2
tar -C /tmp/sbw -czf "$OUT/sbw-single.tgz" --exclude='*compile*' --exclude='torch_extensions' --exclude='triton' . 2>/dev/null
ls -la "$OUT"; echo "call 2 ended at $((SECONDS - T0)) s"
