# Call 21 (2026-11-29, one nvidia-h200, <= 540 s): ac4d17d on a GPU (its review mend had not run on one): the cold
# command of c18 (a self-pair twice, ELU's seed once: phases, spare workers used), the GPU-marked evaluator tests,
# the CUDA red team in full; then the torch.compile baselines over level 1 (both modes, task by task since 5745efe)
# with the time left. Prepare as ../../2026-11-28-h200x4-kernelbench/calls/c9.sh's header says; carry
# [".whl", ".calls", "kb/level1"]. Run: bash .calls/c21.sh 2>&1 | tee $OUT/c21.log
CALL=${CALL:-c21} DEADLINE=${DEADLINE:-540}
source .calls/setup.sh
T=kernelrl/tasks/builtin/level1/11_ELU.py C=kernelrl/tasks/builtin/seeds/level1/11_ELU/functional_elu.py
mkdir -p /tmp/cold "$OUT/cold"
now() { date +%s.%N; }
phases() { python3 -c "import json,sys; r=json.load(open(sys.argv[1])); t=r.get('timing') or {}; print('speedup', r.get('speedup'), 'wall_s', r.get('wall_s'), 'phases', t.get('phases_s'), 'reverify', t.get('reverify_speedup'), 'spares', t.get('spare_workers_used'), 'flags', r.get('flags'), 'error', (r.get('error') or '')[:200])" "$1" 2>&1 | tail -1; }
cold() {  # NAME TASK CAND: one cold command, its wall time and evaluate()'s phases
  local n=$1 t=$2 c=$3 s; s=$(now)
  python3 -m kernelrl.cli eval "$t" "$c" --device cuda --json > "$OUT/cold/$n.json" 2> "$OUT/cold/$n.err"
  echo "cold $n: command $(python3 -c "print(round($(now) - $s, 2))") s; $(phases "$OUT/cold/$n.json")"
}
{ cat "$T"; printf '\n\nclass ModelNew(Model):\n    pass\n'; } > /tmp/cold/self_elu.py
for i in 1 2; do cold eluself$i "$T" /tmp/cold/self_elu.py; done
cold elu1 "$T" "$C"
echo "gpu tests at $((SECONDS - T0)) s"
timeout 200 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_worker_inputs.py tests/test_graph_safety.py \
    tests/test_block_generators.py tests/test_devshare.py tests/test_evaluator_start.py > /tmp/cold/gputests.log 2>&1
echo "gpu tests rc $? at $((SECONDS - T0)) s"; tail -5 /tmp/cold/gputests.log
KERNELRL_REDTEAM_CLOCK=held timeout 300 python3 -m pytest -q -s -m gpu -p no:cacheprovider \
    tests/redteam/test_redteam_cuda.py > /tmp/cold/redteam_cuda.log 2>&1
echo "redteam rc $? at $((SECONDS - T0)) s"; grep -E "passed|failed|FAILED|Error" /tmp/cold/redteam_cuda.log | tail -8
cp /tmp/cold/*.log "$OUT/cold/"
kblane 0 l1c21 1 "$(python3 .calls/todo.py 1 1/1 "torch.compile,torch.compile reduce-overhead" .calls/done/*.json)" \
    baseline:compile baseline:compile-reduce-overhead
grep -v "kernels scored" /tmp/kb/l1c21.log | grep "\[" | tail -40
tar -C "$OUT" -czf "$OUT/cold.tgz" cold && rm -rf "$OUT/cold"
tar -C /tmp -czf "$OUT/${CALL}kb.tgz" --exclude='*/home' kb; ls -la "$OUT"; echo "call $CALL ended at $((SECONDS - T0)) s"
