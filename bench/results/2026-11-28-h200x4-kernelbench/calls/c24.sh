# Call 24 (2026-12-01, one nvidia-h200, <= 570 s): (1) where a torch.compile candidate's build time goes (probe.py,
# and -X importtime of torch._dynamo); (2) why 5_Matrix_scalar_multiplication's reduce-overhead capture ran past
# 8.8 s (the cold command in the background, py-spy of every process during its capture); (3) the compile
# baselines over level 1 (lane1.sh) in what is left. Carry [".whl", ".calls", "kb/level1"].
# Run: bash .calls/c24.sh 2>&1 | tee $OUT/c24.log
CALL=c24 DEADLINE=${DEADLINE:-560}
source .calls/setup.sh
mkdir -p "$OUT/c24"
python3 .calls/probe.py 2>&1 | tee "$OUT/c24/probe.txt"
python3 .calls/probe.py 2>&1 | tee "$OUT/c24/probe2.txt"   # again, the file cache now warm
python3 -X importtime -c 'import torch; import torch._dynamo' 2> "$OUT/c24/importtime.txt"
sort -t'|' -k2 -n -r "$OUT/c24/importtime.txt" | head -25
echo "probe done at $((SECONDS - T0)) s"
python3 - <<'PY'
from kernelrl.tasks.loader import load_task_file
from kernelrl.reports.sources import resolve
t = load_task_file("kb/level1/5_Matrix_scalar_multiplication.py", suite="kb", level=1)
src = resolve("baseline:compile-reduce-overhead", [t], device_kind="cuda")
open("/tmp/t5ro.py", "w").write(src.picks[0].source)
PY
t5=$SECONDS
timeout 100 python3 -m kernelrl.cli eval kb/level1/5_Matrix_scalar_multiplication.py /tmp/t5ro.py --device cuda --json \
    > "$OUT/c24/t5ro.json" 2> "$OUT/c24/t5ro.err" &
EV=$!
for at in 16 20 24 28; do
  sleep $(( t5 + at - SECONDS )); spydump "t5-$at"; echo "spydump at $((SECONDS - t5)) s"
done
wait $EV; echo "t5 eval rc $? wall $((SECONDS - t5)) s"
cp -r /tmp/spy "$OUT/c24/spy"
python3 -c "import json; r=json.load(open('$OUT/c24/t5ro.json')); print({k: r.get(k) for k in ('success','speedup','flags','error','wall_s')}); print(r.get('timing',{}).get('phases_s'))" 2>&1 | tail -3
echo "task 5 probe done at $((SECONDS - T0)) s"
CALL=c24 LVL=1 DEADLINE=$(( DEADLINE - (SECONDS - T0) )) bash .calls/lane1.sh
