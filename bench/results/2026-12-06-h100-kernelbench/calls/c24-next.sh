# Call 24 (written 2026-12-07, fourth session, after c20-c23): the changes of that session on a GPU, then the
# compile baselines. Prepare with calls/prepare.sh (it copies this file to .calls/c24.sh); carry
# [".whl", ".calls", "kb/level1", "kb/level3"]:
#   bash .calls/c24.sh 2>&1 | tee $OUT/c24.log
# 1. GPU tests of the changes: the worker's device context begun while it imports torch (tests/test_worker_context.py),
#    the CUDA-graph baseline keeping a rebound state alive (tests/test_reports.py), and the red team's honest
#    host-sync candidate (BLOCKING_SYNC now set by the context thread: its sync_schedule must read "blocking").
# 2. The cold command A/B (issue 32 item 4, goal <= 12 s): ELU against itself, the context thread on and off
#    (KERNELRL_EARLY_CONTEXT=0 in the parent), alternating, three each; a candidate that does not parse; each JSON's
#    command_s (the process's age at each step), timing.close_s, timing.worker_context and, of correctness,
#    correctness_split_s and device_compare_s (the reference worker's map/compare/unmap seconds) into $OUT/cold.tgz.
# 3. L3 33_VanillaRNN under the CUDA-graph baseline again (the wrapper's fix; its row replaces c22's failure), and
#    L1 45/46 (correctness' variants now drawn in place: their out-of-memory failures should be gone); plus the GPU
#    test of that (tests/test_evaluator.py, the variant draw's peak).
# 4. Both torch.compile modes over level 1 from where c23 stopped (levels.sh), until the deadline.
CALL=c24 DEADLINE=${DEADLINE:-565}
source .calls/setup.sh
timeout 200 python3 -m pytest -q -p no:cacheprovider tests/test_worker_context.py \
    "tests/test_reports.py::test_the_cuda_graph_baseline_keeps_a_rebound_state_alive" \
    "tests/redteam/test_redteam_cuda.py::test_redteam_cuda[honest_host_sync]" \
    "tests/test_evaluator.py::test_a_variant_draw_on_the_gpu_holds_at_most_two_tensors_of_its_size" 2>&1 | tail -15 | tee "$OUT/gputests.log"
T=kernelrl/tasks/builtin/level1/11_ELU.py
mkdir -p /tmp/cold "$OUT/cold"
now() { date +%s.%N; }
show() { python3 -c "import json,sys; r=json.load(open(sys.argv[1])); t=r.get('timing') or {}; print('speedup', r.get('speedup'), 'wall_s', r.get('wall_s'), 'command_s', r.get('command_s'), 'close_s', t.get('close_s'), 'phases', t.get('phases_s'), 'context', t.get('worker_context'), 'split', t.get('correctness_split_s'), 'device_compare', t.get('device_compare_s'), 'sched', (r.get('sandbox') or {}).get('sync_schedule'), 'spares', t.get('spare_workers_used'), 'flags', r.get('flags'), 'error', (r.get('error') or '')[:200])" "$1" 2>&1 | tail -1; }
cold() {  # NAME TASK CAND [ENV...]: one cold command as a person types it, its wall time and where it went
  local n=$1 t=$2 c=$3 s e; shift 3; s=$(now)
  env "$@" python3 -m kernelrl.cli eval "$t" "$c" --device cuda --json > "$OUT/cold/$n.json" 2> "$OUT/cold/$n.err"
  e=$(now); echo "cold $n: command $(python3 -c "print(round($e - $s, 2))") s; $(show "$OUT/cold/$n.json")"
}
s=$(now); python3 -c "import torch"; echo "torch import: $(python3 -c "print(round($(now) - $s, 2))") s"
s=$(now); python3 -c "import torch; torch.zeros(1, device='cuda'); torch.cuda.synchronize()"
echo "torch + CUDA context: $(python3 -c "print(round($(now) - $s, 2))") s"
s=$(now); python3 -c "import ctypes; l = ctypes.CDLL('libcuda.so.1'); assert l.cuInit(0) == 0"
echo "python + cuInit alone: $(python3 -c "print(round($(now) - $s, 2))") s"
nvidia-smi --query-gpu=persistence_mode,clocks.sm,clocks.max.sm --format=csv
{ cat "$T"; printf '\n\nclass ModelNew(Model):\n    pass\n'; } > /tmp/cold/self_elu.py
for i in 1 2 3; do
  cold on$i "$T" /tmp/cold/self_elu.py
  cold off$i "$T" /tmp/cold/self_elu.py KERNELRL_EARLY_CONTEXT=0
done
printf 'class ModelNew(torch.nn.Module:\n    pass\n' > /tmp/cold/broken.py
cold broken "$T" /tmp/cold/broken.py
tar -C "$OUT" -czf "$OUT/cold.tgz" cold && rm -rf "$OUT/cold"
echo "left after the cold commands: $(left) s"
# 3: the three tasks, as lane1.sh's kblane runs a level (their reports packed beside the levels' lanes below)
kblane 0 l3c24g 3 33_VanillaRNN baseline:cuda-graph
kblane 0 l1c24g 1 45_Average_Pooling_2D,46_Average_Pooling_3D baseline:cuda-graph
mkdir -p /tmp/lanes_c24g
for n in l3c24g l1c24g; do
  grep "\[[12]/" /tmp/kb/$n.log | cut -c1-300
  [ -s /tmp/kb/$n/report/report.json ] && gzip -c /tmp/kb/$n/report/report.json > /tmp/lanes_c24g/$n-report.json.gz
  cp /tmp/kb/$n.log /tmp/lanes_c24g/ 2>/dev/null
done
tar -C /tmp -cf "$OUT/c24g-lanes.tar" lanes_c24g
# 4
CALL=c24 LVLS="1" DEADLINE=$(( $(left) - 10 )) bash .calls/levels.sh
echo "call 24 ended at $((SECONDS - T0)) s"
