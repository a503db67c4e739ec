# Sourced by every call of this session: carried site packages, environment, a record of the machine.
set -uo pipefail
T0=$SECONDS
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
ROOT=$PWD
# a machine still warm from the last call keeps its /tmp: that call's lanes would be packed again with this one's
rm -rf /tmp/kb /tmp/kbs /tmp/gpu?.log
if [ ! -d /tmp/site/prefect ]; then mkdir -p /tmp/site && tar -C /tmp/site -xJf .whl/site.tar.xz || echo "site unpack failed"; fi
SP=$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
echo 'import sys; sys.path.insert(0, "/tmp/site")' > "$SP/00-kernelrl-site.pth"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 KERNELRL_HOME=/tmp/krlhome PREFECT_HOME=/tmp/prefect
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false KERNELRL_REPORT_TO=none
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 TORCH_CUDA_ARCH_LIST="9.0+PTX"
export PREFECT_UI_ENABLED=false PREFECT_SERVER_ANALYTICS_ENABLED=false DO_NOT_TRACK=1 OMP_NUM_THREADS=4
{ date -u; uptime; nvidia-smi --query-gpu=index,name,uuid,memory.used,memory.total --format=csv
  python3 -c 'import sys, torch; print(sys.version.split()[0], "torch", torch.__version__)'; nproc
  git log -1 --format='commit %H %s' 2>/dev/null; git status --short 2>/dev/null | head; ps aux | grep -c "[k]ernelrl"; } > "$OUT/env-$CALL.txt" 2>&1
left() { echo $(( DEADLINE - (SECONDS - T0) )); }
# lane GPU NAME INDICES: the evaluator benchmark (v11's flags) on one GPU, rows to /tmp/ebw/NAME, stopping by DEADLINE
lane() {
  [ -z "$3" ] && { echo "lane $2: nothing left to run"; return; }
  local l; l=$(left); (( l < 90 )) && { echo "lane $2: no time ($l s)"; return; }
  local mm; mm=$(python3 -c "print(round(max(0.5, ($l - 85) / 60), 2))")
  mkdir -p /tmp/ebw
  timeout "$l" python3 bench/evaluator_bench.py --device "cuda:$1" --out-dir "/tmp/ebw/$2" --no-prebuild --only "$3" \
      --repeats 5 --long-factor 10 --max-wall-s 60 --max-minutes "$mm" > "/tmp/ebw/$2.log" 2>&1
  echo "lane $2 (cuda:$1, $3) ended rc $? at $((SECONDS - T0)) s"
}
# kbself NAME TIMEOUT: a KernelBench level-1 reference against itself through the command a person types
kbself() {
  mkdir -p /tmp/kbs; local f=kb/level1/$1.py c=/tmp/kbs/self_$1.py
  { cat "$f"; printf '\n\nclass ModelNew(Model):\n    pass\n'; } > "$c"
  local t=$SECONDS
  timeout "$2" python3 -m kernelrl.cli eval "$f" "$c" --device cuda --json > "/tmp/kbs/$1.json" 2> "/tmp/kbs/$1.err"
  echo "kbself $1 rc $? wall $((SECONDS - t)) s: $(python3 -c "import json,sys; r=json.load(open('/tmp/kbs/$1.json')); print({k: r.get(k) for k in ('success','speedup','flags','wall_s')})" 2>&1 | tail -1)" | tee -a /tmp/kbs/summary.txt
}
# kblane GPU NAME LEVEL TASKS SOURCES...: kernelrl bench over KernelBench tasks on one GPU (own store), partial report kept
kblane() {
  local g=$1 name=$2 lvl=$3 tasks=$4; shift 4
  [ -z "$tasks" ] && { echo "kblane $name: no tasks"; return; }
  local l; l=$(left); (( l < 80 )) && { echo "kblane $name: no time ($l s)"; return; }
  local mm; mm=$(python3 -c "print(round(max(0.5, ($l - 60) / 60), 2))")
  local src=(); for s in "$@"; do src+=(--source "$s"); done
  mkdir -p /tmp/kb/$name
  KERNELRL_HOME=/tmp/kb/$name/home timeout $(( l - 15 )) python3 -m kernelrl.cli bench --suite kb --levels "$lvl" --tasks "$tasks" \
      "${src[@]}" --device "cuda:$g" --budget-s 2 --correctness-trials 20 --max-minutes "$mm" --no-plots \
      --out /tmp/kb/$name/report > /tmp/kb/$name.log 2>&1
  echo "kblane $name (cuda:$g) ended rc $? at $((SECONDS - T0)) s: $(grep -c 'speedup\|EvaluatorError' /tmp/kb/$name.log) lines"
}
# spydump TAG: py-spy stacks of every python process of this call (a hang's where), to /tmp/spy/TAG.txt
spydump() {
  mkdir -p /tmp/spy
  for p in $(pgrep -f "python3"); do
    [ "$p" = "$$" ] && continue
    { echo "=== pid $p: $(tr '\0' ' ' < /proc/$p/cmdline | cut -c1-200)"; timeout 20 .whl/py-spy dump --pid "$p" 2>&1 | head -60; } >> "/tmp/spy/$1.txt"
  done
}
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
