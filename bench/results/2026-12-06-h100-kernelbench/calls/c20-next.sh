# Call 20 (next session; written 2026-12-07 after c17-c19): issue 32 item 4 re-checked on an H100 at the current
# version (it was measured on an H200 at version 19, ../../2026-11-29-h200-cold-eval/: 10.3-10.5 s for a level-1
# self-pair, 11.35 s for a cached load_inline candidate; the evaluator has changed six versions since), then the
# CUDA-graph baseline's level 2 from 29 and level 3 (levels-next.sh) until the deadline. Prepare as ../README.md says
# (.calls/done/ = this folder's raw/c*/*-report.json.gz; levels-next.sh as .calls/levels.sh); carry
# [".whl", ".calls", "kb/level2", "kb/level3"]:
#   bash .calls/c20.sh 2>&1 | tee $OUT/c20.log
# The cold commands' JSON go into $OUT/cold.tgz. Goal: <= 12 s a command for a level-1 task without extensions (no
# re-measurement: ELU against itself), a cached extension not rebuilt (inline2's build phase < 1 s).
CALL=c20 DEADLINE=${DEADLINE:-565}
source .calls/setup.sh
T=kernelrl/tasks/builtin/level1/11_ELU.py C=kernelrl/tasks/builtin/seeds/level1/11_ELU/functional_elu.py
X=kernelrl/tasks/builtin/level2/08_Elementwise_Chain.py XC=kernelrl/tasks/builtin/seeds/level2/08_Elementwise_Chain/cuda_fused_chain.py
mkdir -p /tmp/cold "$OUT/cold"
now() { date +%s.%N; }
phases() { python3 -c "import json,sys; r=json.load(open(sys.argv[1])); t=r.get('timing') or {}; print('speedup', r.get('speedup'), 'wall_s', r.get('wall_s'), 'phases', t.get('phases_s'), 'reverify', t.get('reverify_speedup'), 'spares', t.get('spare_workers_used'), 'flags', r.get('flags'), 'error', (r.get('error') or '')[:200])" "$1" 2>&1 | tail -1; }
cold() {  # NAME TASK CAND: one cold command (a fresh process, as a person types it), its wall time and phases
  local n=$1 t=$2 c=$3 s e; s=$(now)
  python3 -m kernelrl.cli eval "$t" "$c" --device cuda --json > "$OUT/cold/$n.json" 2> "$OUT/cold/$n.err"
  e=$(now); echo "cold $n: command $(python3 -c "print(round($e - $s, 2))") s; $(phases "$OUT/cold/$n.json")"
}
s=$(now); python3 -c "import torch; torch.zeros(1, device='cuda'); torch.cuda.synchronize()"
echo "torch + CUDA context: $(python3 -c "print(round($(now) - $s, 2))") s (the floor under any cold command)"
{ cat "$T"; printf '\n\nclass ModelNew(Model):\n    pass\n'; } > /tmp/cold/self_elu.py
for i in 1 2 3; do cold eluself$i "$T" /tmp/cold/self_elu.py; done   # the goal's case: no re-measurement
for i in 1 2; do cold elu$i "$T" "$C"; done   # ~3.0x: re-measured in fresh processes above reverify_above
printf 'class ModelNew(torch.nn.Module:\n    pass\n' > /tmp/cold/broken.py
cold broken "$T" /tmp/cold/broken.py
for i in 1 2; do cold inline$i "$X" "$XC"; done  # the first builds the extension, the second must find it cached
# the warm path beside them, on the same machine: one `kernelrl worker` over 12 seed candidates, the same budget
echo "left before the service bench: $(left) s"
timeout 200 python3 bench/service_bench.py --gpus 0 --only-single --n 12 --budget-s 2 --correctness-trials 20 \
    --max-minutes 3 --out "$OUT/service.json" > /tmp/cold/service.log 2>&1
echo "service bench rc $?"; grep -A12 "^# Evaluation service" /tmp/cold/service.log | head -16
python3 -c "import json; p=json.load(open('$OUT/service.json'))['phases'][0]; print('service_s per job', p['service_s'])" 2>&1 | tail -1
tar -C "$OUT" -czf "$OUT/cold.tgz" cold && rm -rf "$OUT/cold"
CALL=c20 LVLS="2 3" SRC=baseline:cuda-graph LABELS="reference in a CUDA graph" DEADLINE=$(( $(left) - 10 )) \
    bash .calls/levels.sh
echo "call 20 ended at $((SECONDS - T0)) s"
