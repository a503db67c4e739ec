#!/usr/bin/env bash
# One device call (the lent H100): set-up from carried wheels, then the parts named in $PARTS, each logged under
# $OUT. Usage on the device machine (see bench/results/*/README.md for the exact calls):
#   PARTS="prebuild floor redteam bench" BENCH_ARGS="--only 0:6 --repeats 3" bash bench/gpu_session.sh
# Parts: prebuild (nvcc builds of the seeds and the red team's extension, in the background on cores 0-7, packed
# to $OUT/ccache.tgz as soon as they are done (whole build folders: torch's JIT reruns ninja in a new process), for
# the next call to carry as .ccache/ccache.tgz), floor (bench/gpu_noise_floor.py: a plain
# in-process paired timer, the yardstick; $FLOOR_PAIRS: other REF CAND pairs), redteam (the CUDA red team through
# pytest), bench (bench/evaluator_bench.py with $BENCH_ARGS), evals / evals2 (bench/eval_one.py once per
# ';'-separated argument set in $EVALS / $EVALS2), wait (for the prebuild: "evals wait evals2"). The probes of
# earlier versions (variants, modes, held, placement) were removed with their scripts (issue 34; git history).
# Several GPUs (one evaluator per GPU, as the service runs them): laneN (N = 1..7) starts bench/evaluator_bench.py
# on cuda:N with $LANEN_ARGS in the background at once (give it tasks without extensions: it does not wait for the
# prebuild), bench0 runs it on cuda:0 with $BENCH0_ARGS without waiting for the prebuild either; the call waits
# for the lanes at its end. With BENCH_WORK set, the benchmark parts write there and everything there is packed into
# $OUT/bench.tgz at the end (the device returns at most 8 files from $OUT).
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    || { echo "wheel install failed"; exit 1; }
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
export KERNELRL_HOME=/tmp/kernelrl-home
export TORCH_CUDA_ARCH_LIST="9.0+PTX"  # every build (prebuild, red team, bench) with the same flags: one cache entry
CACHE=/tmp/kernelrl-compile-cache
WORK=${BENCH_WORK:-$OUT}
# DEADLINE (seconds from the start): no timed part (tmo) runs past it, so the packing at the end happens inside the call's limit
left() { local r=$(( ${DEADLINE:-100000} - SECONDS )); (( r < 1 )) && r=1; echo $(( $1 < r ? $1 : r )); }
tmo() { local t; t=$(left "$1"); shift; timeout "$t" "$@"; }  # tmo SECONDS CMD...: timeout, within DEADLINE
wait_prebuild() { if [ -n "${PREBUILD_PID:-}" ]; then wait "$PREBUILD_PID"; cat "$OUT/prebuild.log"; PREBUILD_PID=; fi; }
# bench_on DEVICE NAME TIMEOUT ARGS...: bench/evaluator_bench.py on one GPU, writing $WORK/NAME
bench_on() { tmo "$3" python3 bench/evaluator_bench.py --device "$1" --out-dir "$WORK/$2" --no-prebuild "${@:4}"; }
mkdir -p "$WORK"
if [ -f .ccache/ccache.tgz ]; then mkdir -p "$CACHE" && tar -C "$CACHE" -xzf .ccache/ccache.tgz && echo "compile cache restored"; fi
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,temperature.gpu \
    --format=csv; python3 -c 'import torch, sys; print(sys.version.split()[0], torch.__version__, torch.cuda.get_device_name(0))'
  nproc; lscpu -e=CPU,CORE,SOCKET 2>/dev/null | tr '\n' ' '; echo; git log -1 --format='commit %H %s' 2>/dev/null; git status --short 2>/dev/null | head -20; } 2>&1 | tee "$OUT/env.txt"
if [[ " ${PARTS:-} " == *" prebuild "* ]]; then
  # Build the candidates' extensions on cores 0-7 while other parts run (their workers are pinned to the top
  # cores): the later parts then find them built.
  ( taskset -c 0-7 python3 bench/evaluator_bench.py --device cuda --out-dir /tmp/prebuild --prebuild-only &
    taskset -c 0-7 python3 -c "
from pathlib import Path
from kernelrl.config.stages import EvalConfig
from kernelrl.evaluation.precompile import precompile
print('redteam illegal_address build:', precompile(Path('tests/redteam/cuda/illegal_address.py').read_text(), EvalConfig(device='cuda'), 'cuda'))" &
    wait
    # packed at once (not at the end of the call): a call cut by its timeout still returns the builds
    [ -d "$CACHE" ] && tar -C "$CACHE" -czf "$OUT/ccache.tgz" . && ls -la "$OUT/ccache.tgz" ) > "$OUT/prebuild.log" 2>&1 &
  PREBUILD_PID=$!
fi
if [ -n "${SMI_MS:-}" ]; then  # the GPU's clocks, power and load every SMI_MS ms, beside everything below
  nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,utilization.gpu,temperature.gpu,clocks_event_reasons.active \
    --format=csv,noheader -lms "$SMI_MS" > "$OUT/smi.csv" 2>&1 &
  SMI_PID=$!
fi
for part in ${PARTS:-redteam bench}; do
  t0=$SECONDS
  case $part in
    prebuild) continue ;;
    floor)
      T=kernelrl/tasks/builtin; S=$T/seeds
      tmo "${FLOOR_TIMEOUT:-120}" python3 bench/gpu_noise_floor.py --evals 5 --budget-s 2 \
        ${FLOOR_PAIRS:-$T/level1/02_Softmax.py $S/level1/02_Softmax/triton_online.py
        $T/level1/03_LayerNorm.py $S/level1/03_LayerNorm/triton_layernorm.py
        $T/level3/06_TransformerBlock.py $S/level3/06_TransformerBlock/fused_primitives.py} 2>&1 | tee "$OUT/floor.log" ;;
    redteam)
      wait_prebuild
      tmo "${REDTEAM_TIMEOUT:-240}" python3 -m pytest -q -s -p no:cacheprovider -m gpu \
        ${REDTEAM_K:+-k "$REDTEAM_K"} tests/redteam/test_redteam_cuda.py 2>&1 | tee "$OUT/redteam_cuda.log" ;;
    evals|evals2)  # bench/eval_one.py once per ';'-separated argument set in $EVALS (evals2: $EVALS2)
      var=${part^^}
      IFS=';' read -ra sets <<< "${!var:-}"
      for args in "${sets[@]}"; do
        echo "== eval_one $args" | tee -a "$OUT/evals.log"
        tmo "${EVALS_TIMEOUT:-200}" python3 bench/eval_one.py $args 2>&1 | tee -a "$OUT/evals.log"
      done ;;
    wait)  # for the prebuild, before parts that time built candidates
      wait_prebuild ;;
    bench)
      wait_prebuild
      bench_on cuda bench "${BENCH_TIMEOUT:-560}" ${BENCH_ARGS:-} 2>&1 | tee "$WORK/bench.log" ;;
    bench0)  # cuda:0 without waiting for the prebuild (tasks without extensions)
      bench_on cuda:0 bench0 "${BENCH0_TIMEOUT:-300}" ${BENCH0_ARGS:-} 2>&1 | tee "$WORK/bench0.log" ;;
    lane[1-7])  # laneN: cuda:N with $LANEN_ARGS, in the background from now on
      n=${part#lane}; args_var=LANE${n}_ARGS; to_var=LANE${n}_TIMEOUT
      bench_on "cuda:$n" "$part" "${!to_var:-560}" ${!args_var:-} > "$WORK/$part.log" 2>&1 &
      LANE_PIDS="${LANE_PIDS:-} $part:$!" ;;
  esac
  echo "part $part: $((SECONDS - t0)) s" | tee -a "$OUT/env.txt"
done
wait_prebuild
for lp in ${LANE_PIDS:-}; do wait "${lp#*:}"; echo "${lp%%:*} done"; tail -n 20 "$WORK/${lp%%:*}.log"; done
[ "$WORK" != "$OUT" ] && tar -C "$WORK" -czf "$OUT/bench.tgz" . && ls -la "$OUT/bench.tgz"
if [ -n "${SMI_PID:-}" ]; then kill "$SMI_PID"; fi  # (a bare && list here made every call exit 1)
