# Call 26 (2026-12-01, one nvidia-h200, <= 590 s): task 5's reduce-overhead timeout again, py-spy of every process
# (c24's dumps did not come back: the device tool returns a few files only, so everything is tarred now); then the
# level-1 compile baselines where c25 stopped. Carry [".whl", ".calls", "kb/level1"]. Run: bash .calls/c26.sh 2>&1 | tee $OUT/c26.log
CALL=c26 DEADLINE=${DEADLINE:-575}
source .calls/setup.sh
python3 - <<'PY'
from kernelrl.tasks.loader import load_task_file
from kernelrl.reports.sources import resolve
t = load_task_file("kb/level1/5_Matrix_scalar_multiplication.py", suite="kb", level=1)
open("/tmp/t5ro.py", "w").write(resolve("baseline:compile-reduce-overhead", [t], device_kind="cuda").picks[0].source)
PY
mkdir -p /tmp/c26; t5=$SECONDS
timeout 60 python3 -m kernelrl.cli eval kb/level1/5_Matrix_scalar_multiplication.py /tmp/t5ro.py --device cuda --json \
    > /tmp/c26/t5ro.json 2> /tmp/c26/t5ro.err &
EV=$!
for at in 9 12 15; do sleep $(( t5 + at - SECONDS )); spydump "t5-$at"; echo "spydump at $((SECONDS - t5)) s"; done
wait $EV; echo "t5 eval rc $? wall $((SECONDS - t5)) s"
cp -r /tmp/spy /tmp/c26/; tar -C /tmp -czf "$OUT/c26-t5.tgz" c26
python3 -c "import json; r=json.load(open('/tmp/c26/t5ro.json')); print({k: r.get(k) for k in ('success','speedup','flags','error','wall_s')})" 2>&1 | tail -2
echo "task 5 probe done at $((SECONDS - T0)) s"
CALL=c26 LVL=1 DEADLINE=$(( DEADLINE - (SECONDS - T0) )) bash .calls/lane1.sh
