#!/usr/bin/env bash
# One device call (the lent H100): set-up from carried wheels, then the parts named in $PARTS, each logged under
# $OUT. Usage on the device machine (see bench/results/*/README.md for the exact calls):
#   PARTS="redteam bench floor" BENCH_ARGS="--only 0:6 --repeats 3" bash bench/gpu_session.sh
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    || { echo "wheel install failed"; exit 1; }
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
export KERNELRL_HOME=/tmp/kernelrl-home
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,temperature.gpu \
    --format=csv; python3 -c 'import torch, sys; print(sys.version.split()[0], torch.__version__, torch.cuda.get_device_name(0))'
  git log -1 --format='commit %H %s' 2>/dev/null; git status --short 2>/dev/null | head -20; } 2>&1 | tee "$OUT/env.txt"
if [[ " ${PARTS:-} " == *" prebuild "* ]]; then
  # Build the candidates' extensions on cores 0-7 while the red team is timed (its workers are pinned to the top
  # core): the benchmark's repeats then find them built.
  taskset -c 0-7 python3 bench/evaluator_bench.py --device cuda --out-dir "$OUT/bench" --prebuild-only \
      > "$OUT/prebuild.log" 2>&1 &
  PREBUILD_PID=$!
fi
for part in ${PARTS:-redteam bench}; do
  t0=$SECONDS
  case $part in
    redteam)
      timeout "${REDTEAM_TIMEOUT:-240}" python3 -m pytest -q -s -p no:cacheprovider -m gpu \
        tests/redteam/test_redteam_cuda.py 2>&1 | tee "$OUT/redteam_cuda.log" ;;
    prebuild) continue ;;
    bench)
      [ -n "${PREBUILD_PID:-}" ] && { wait "$PREBUILD_PID"; cat "$OUT/prebuild.log"; }
      timeout "${BENCH_TIMEOUT:-560}" python3 bench/evaluator_bench.py --device cuda --out-dir "$OUT/bench" \
        ${PREBUILD_PID:+--no-prebuild} ${BENCH_ARGS:-} 2>&1 | tee "$OUT/bench.log" ;;
  esac
  echo "part $part: $((SECONDS - t0)) s" | tee -a "$OUT/env.txt"
done
