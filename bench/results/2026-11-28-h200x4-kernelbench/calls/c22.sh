# Call 22 (2026-11-29, one nvidia-h200, <= 540 s): 7c11e24's reduce-overhead wrapper on a GPU (its GPU test); the
# cold self-pair command twice more, on a machine whose file cache the test warmed (c21 ran it first after boot);
# then the torch.compile baselines over level 1, both modes, task by task, with the time left. Prepare as
# ../../2026-11-28-h200x4-kernelbench/calls/c9.sh's header says; carry [".whl", ".calls", "kb/level1"].
# Run: bash .calls/c22.sh 2>&1 | tee $OUT/c22.log
CALL=${CALL:-c22} DEADLINE=${DEADLINE:-520}
source .calls/setup.sh
T=kernelrl/tasks/builtin/level1/11_ELU.py
mkdir -p /tmp/cold "$OUT/cold"
now() { date +%s.%N; }
phases() { python3 -c "import json,sys; r=json.load(open(sys.argv[1])); t=r.get('timing') or {}; print('speedup', r.get('speedup'), 'wall_s', r.get('wall_s'), 'phases', t.get('phases_s'), 'reverify', t.get('reverify_speedup'), 'spares', t.get('spare_workers_used'), 'flags', r.get('flags'), 'error', (r.get('error') or '')[:200])" "$1" 2>&1 | tail -1; }
cold() {  # NAME TASK CAND: one cold command, its wall time and evaluate()'s phases
  local n=$1 t=$2 c=$3 s; s=$(now)
  python3 -m kernelrl.cli eval "$t" "$c" --device cuda --json > "$OUT/cold/$n.json" 2> "$OUT/cold/$n.err"
  echo "cold $n: command $(python3 -c "print(round($(now) - $s, 2))") s; $(phases "$OUT/cold/$n.json")"
}
timeout 200 python3 -m pytest -q -s -m gpu -p no:cacheprovider tests/test_reports.py > /tmp/cold/gputest.log 2>&1
echo "gpu test rc $? at $((SECONDS - T0)) s"; tail -4 /tmp/cold/gputest.log
{ cat "$T"; printf '\n\nclass ModelNew(Model):\n    pass\n'; } > /tmp/cold/self_elu.py
for i in 1 2; do cold eluself$i "$T" /tmp/cold/self_elu.py; done
cp /tmp/cold/*.log "$OUT/cold/"
kblane 0 l1c22 1 "$(python3 .calls/todo.py 1 1/1 "torch.compile,torch.compile reduce-overhead" .calls/done/*.json)" \
    baseline:compile baseline:compile-reduce-overhead
grep -v "kernels scored" /tmp/kb/l1c22.log | grep "\[" | cut -c1-400 | tail -40
tar -C "$OUT" -czf "$OUT/cold.tgz" cold && rm -rf "$OUT/cold"
tar -C /tmp -czf "$OUT/${CALL}kb.tgz" --exclude='*/home' kb; ls -la "$OUT"; echo "call $CALL ended at $((SECONDS - T0)) s"
