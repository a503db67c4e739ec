# Sourced by every call of this folder (copied to .calls/setup.sh): carried site packages, environment, a record of
# the machine, and the benchmark lane. Carry [".whl", ".calls"].
set -uo pipefail
T0=$SECONDS
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
ROOT=$PWD
if [ ! -d /tmp/site/prefect ]; then mkdir -p /tmp/site && tar -C /tmp/site -xJf .whl/site.tar.xz || echo "site unpack failed"; fi
SP=$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
echo 'import sys; sys.path.insert(0, "/tmp/site")' > "$SP/00-kernelrl-site.pth"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 KERNELRL_HOME=/tmp/krlhome PREFECT_HOME=/tmp/prefect
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false KERNELRL_REPORT_TO=none
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 TORCH_CUDA_ARCH_LIST="9.0+PTX"
export PREFECT_UI_ENABLED=false PREFECT_SERVER_ANALYTICS_ENABLED=false DO_NOT_TRACK=1 OMP_NUM_THREADS=4
{ date -u; uptime; nvidia-smi --query-gpu=index,name,uuid,memory.used,memory.total,clocks.max.sm --format=csv
  python3 -c 'import sys, torch; print(sys.version.split()[0], "torch", torch.__version__)'; nproc
  cat .calls/commit 2>/dev/null; ls /tmp/kernelrl-compile-cache 2>/dev/null | wc -l; ls /tmp/ebw/bench 2>/dev/null; } > "$OUT/env-$CALL.txt" 2>&1
left() { echo $(( DEADLINE - (SECONDS - T0) )); }
# The 35-task evaluator benchmark (one honest seed a built-in task), resumed in /tmp/ebw/bench: the MoE task first,
# then the list's order. A fresh machine gets the rows of earlier calls from .calls/done/rows.jsonl.
ORDER="31,$(seq -s, 0 30),32,33,34"
blane() {  # blane REPEATS LONG_FACTOR
  mkdir -p /tmp/ebw/bench
  [ -f /tmp/ebw/bench/rows.jsonl ] || { [ -f .calls/done/rows.jsonl ] && cp .calls/done/rows.jsonl /tmp/ebw/bench/; }
  local l; l=$(left); (( l < 80 )) && { echo "blane: no time ($l s)"; return; }
  local mm; mm=$(python3 -c "print(round(max(0.5, ($l - 75) / 60), 2))")
  timeout "$l" python3 bench/evaluator_bench.py --device cuda:0 --out-dir /tmp/ebw/bench --no-prebuild --resume \
      --only "$ORDER" --repeats "$1" --long-factor "$2" --clock held --max-wall-s 60 --max-minutes "$mm" \
      >> /tmp/ebw/bench.log 2>&1
  echo "blane ended rc $? at $((SECONDS - T0)) s; rows: $(wc -l < /tmp/ebw/bench/rows.jsonl)"
  python3 - <<'PY'
import json
for line in open("/tmp/ebw/bench.log"):
    if line.startswith('{"task"'):
        r = json.loads(line)
        print(r["task"][12:52], [round(x, 3) if x else x for x in r["scores"]], r.get("long") and round(r["long"], 3),
              r["walls"], ",".join(r["flags"])[:80], (r.get("error") or "")[:100])
PY
  cp /tmp/ebw/bench/rows.jsonl "$OUT/rows.jsonl"; cp /tmp/ebw/bench/meta.json "$OUT/meta.json" 2>/dev/null
  cp /tmp/ebw/bench.log "$OUT/bench.log"
}
