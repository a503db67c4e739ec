# Call 18 (ran 2026-11-29 on one nvidia-h200 at abcc7fa, 384 s; c17 plus --device auto, outputs tarred): the command a person
# types, cold, side by side with the warm service path in the same call. Goal: <= 12 s for a level-1 task without
# extensions; a cached load_inline extension not rebuilt. Measured 2026-11-28 on the H100 x4 (with spares, then
# removed from the one-shot command): 26.7-28.0 s a command, ~7 s of it outside evaluate().
# Prepare as c9.sh's header says; carry [".whl", ".calls"] (no kb needed). Output: $OUT/c17.log, cold/*.json|err,
# importtime.txt, cold.speedscope.json (py-spy, every process of one cold command), service.json.
CALL=${CALL:-c18} DEADLINE=${DEADLINE:-560}
source .calls/setup.sh
T=kernelrl/tasks/builtin/level1/11_ELU.py C=kernelrl/tasks/builtin/seeds/level1/11_ELU/functional_elu.py
X=kernelrl/tasks/builtin/level2/08_Elementwise_Chain.py XC=kernelrl/tasks/builtin/seeds/level2/08_Elementwise_Chain/cuda_fused_chain.py
mkdir -p /tmp/cold "$OUT/cold"
now() { date +%s.%N; }
phases() { python3 -c "import json,sys; r=json.load(open(sys.argv[1])); t=r.get('timing') or {}; print('speedup', r.get('speedup'), 'wall_s', r.get('wall_s'), 'phases', t.get('phases_s'), 'reverify', t.get('reverify_speedup'), 'spares', t.get('spare_workers_used'), 'flags', r.get('flags'), 'error', (r.get('error') or '')[:200])" "$1" 2>&1 | tail -1; }
cold() {  # NAME TASK CAND [PREFIX...]: one cold command, its wall time and evaluate()'s phases
  local n=$1 t=$2 c=$3; shift 3; local s e; s=$(now)
  "$@" python3 -m kernelrl.cli eval "$t" "$c" --device cuda --json > "$OUT/cold/$n.json" 2> "$OUT/cold/$n.err"
  e=$(now); echo "cold $n: command $(python3 -c "print(round($e - $s, 2))") s; $(phases "$OUT/cold/$n.json")"
}
# what a bare interpreter, torch and a CUDA context cost here (the floor under any cold command)
for i in 1 2; do s=$(now); python3 -c "import torch"; echo "import torch: $(python3 -c "print(round($(now) - $s, 2))") s"; done
s=$(now); python3 -c "import torch; torch.zeros(1, device='cuda'); torch.cuda.synchronize()"; echo "torch + CUDA context: $(python3 -c "print(round($(now) - $s, 2))") s"
for i in 1 2 3; do cold elu$i "$T" "$C"; done
# the same task against itself (score ~1: no re-verification), and a candidate that does not parse (60294e8: no worker)
{ cat "$T"; printf '\n\nclass ModelNew(Model):\n    pass\n'; } > /tmp/cold/self_elu.py
for i in 1 2; do cold eluself$i "$T" /tmp/cold/self_elu.py; done
printf 'class ModelNew(torch.nn.Module:\n    pass\n' > /tmp/cold/broken.py
cold broken "$T" /tmp/cold/broken.py
# --device left at auto (the default): the device named by the CUDA driver's count, without torch (config/devices.py)
s=$(now); python3 -m kernelrl.cli eval "$T" "$C" --json > "$OUT/cold/eluauto.json" 2> "$OUT/cold/eluauto.err"; echo "cold eluauto: command $(python3 -c "print(round($(now) - $s, 2))") s; $(phases "$OUT/cold/eluauto.json")"
cold elu_importtime "$T" "$C" env PYTHONPROFILEIMPORTTIME=1
sort -t'|' -k2 -n -r "$OUT/cold/elu_importtime.err" 2>/dev/null | head -40 > "$OUT/importtime.txt"; rm -f "$OUT/cold/elu_importtime.err"
cold elu_spy "$T" "$C" .whl/py-spy record --subprocesses --rate 50 --format speedscope -o "$OUT/cold.speedscope.json" --
for i in 1 2; do cold inline$i "$X" "$XC"; done  # the first builds the extension, the second must find it cached
echo "left before the service bench: $(left) s"
# the warm path: one `kernelrl worker` (warm processes, spares) over the same two tasks' seeds, the same budget
timeout $(( $(left) - 20 )) python3 bench/service_bench.py --gpus 0 --only-single --n 12 --budget-s 2 \
    --correctness-trials 20 --max-minutes 4 --out "$OUT/service.json" > /tmp/cold/service.log 2>&1
echo "service bench rc $?"; tail -25 /tmp/cold/service.log
python3 -c "import json; p=json.load(open('$OUT/service.json'))['phases'][0]; print('service_s per job', p['service_s'])" 2>&1 | tail -1
tar -C "$OUT" -czf "$OUT/cold.tgz" cold && rm -rf "$OUT/cold"
echo "call $CALL ended at $((SECONDS - T0)) s"
