#!/usr/bin/env bash
# Data-parallel sft and crl on 2 GPUs of one host, a few steps each, with the tiny model, a SQLite store and
# local checkpoints; everything written under OUT (manifests, per-step crl metrics, logs, nvidia-smi, versions).
#
#   bench/multi_gpu_train.sh [OUT]                       # default OUT=bench/results/multi-gpu-<date>
#   WHEELS=/path/to/wheels bench/multi_gpu_train.sh OUT  # install missing packages offline first
#   EVAL_DEVICE=cuda ACCEL=recipes/accelerate/fsdp_2gpu.yaml NPROC=2 bench/multi_gpu_train.sh OUT
#
# Env knobs (why):
#   WHEELS       a directory of wheels; when set, packages the image lacks (trl, peft, datasets, sqlalchemy, ...)
#                are installed from it with `pip install --no-index` into a venv that sees the system packages
#                (the GPU image's torch/transformers/accelerate stay as they are).
#   EVAL_DEVICE  where candidates are timed: cpu (default: keeps the GPUs for training) or cuda.
#   ACCEL        accelerate config (default recipes/accelerate/ddp_2gpu.yaml; fsdp_2gpu.yaml for FSDP).
#   NPROC        processes = GPUs used for training (default 2).
#   STEPS        GRPO steps (default 4); SFT runs 3 epochs of the augmentation successes.
#
# One GPU for training and one for evaluation (the issue's H100 check: >= 20 GRPO steps, GPU evaluation):
#   NPROC=1 STEPS=20 EVAL_DEVICE=cuda:1 CUDA_VISIBLE_DEVICES=0,1 bench/multi_gpu_train.sh OUT
# (with a single GPU: EVAL_DEVICE=cuda shares it). The per-step time split is in OUT/crl-metrics.jsonl.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${1:-bench/results/multi-gpu-$(date -u +%F)}"
OUT="$(mkdir -p "$OUT" && cd "$OUT" && pwd)"
EVAL_DEVICE="${EVAL_DEVICE:-cpu}"
ACCEL="${ACCEL:-recipes/accelerate/ddp_2gpu.yaml}"
NPROC="${NPROC:-2}"
STEPS="${STEPS:-4}"
PY="${PYTHON:-python3}"

NEEDED="trl datasets sqlalchemy alembic pydantic_settings boto3 yaml psutil accelerate transformers torch"
missing() { "$1" - <<PYM
import importlib.util
print(" ".join(m for m in "$NEEDED".split() if importlib.util.find_spec(m) is None))
PYM
}
if [ -n "${WHEELS:-}" ]; then
  "$PY" -m venv --system-site-packages "$OUT/venv"
  PY="$OUT/venv/bin/python"
  # only what the image lacks (the image's torch/transformers/accelerate stay); offline: --no-index
  "$PY" -m pip install -q --no-index --find-links "$WHEELS" -r bench/multi_gpu_requirements.txt \
      --upgrade-strategy only-if-needed 2>&1 | tail -5 || true
fi
MISSING="$(missing "$PY")"
if [ -n "$MISSING" ]; then
  echo "missing python packages: $MISSING"
  echo "carry wheels (bench/multi_gpu_requirements.txt) and run with WHEELS=<dir>"
  exit 2
fi
ACCEL_BIN=("$PY" -m accelerate.commands.launch)

export KERNELRL_HOME="$OUT/home" KERNELRL_STORE_URL="sqlite:///$OUT/home/store.db"
unset KERNELRL_CHECKPOINT_URI
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
export KERNELRL_LOG_LEVEL=WARNING PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" OMP_NUM_THREADS=4
mkdir -p "$KERNELRL_HOME"
RUN="mgpu-$(date -u +%H%M%S)"
SETS=(--set task_limit=2 --set "eval.device=$EVAL_DEVICE" --set eval.budget_s=0.5 --set eval.correctness_trials=5
      --set sft.epochs=3 --set sft.batch_size=2 --set sft.save_steps=4 --set sft.eval_samples_per_task=1
      --set sft.eval_max_new_tokens=64 --set selfsup.iterations=1 --set selfsup.samples_per_task=1
      --set selfsup.max_new_tokens=64 --set selfsup.eval_samples_per_task=0
      --set "crl.steps=$STEPS" --set crl.group_size=4 --set crl.prompts_per_step=2 --set crl.save_steps=2
      --set crl.max_completion_length=128 --set crl.eval_samples_per_task=1 --set crl.eval_max_new_tokens=64)

{
  echo "date: $(date -u +%FT%TZ)"; echo "host: $(hostname)"; echo "run: $RUN"; echo "accelerate config: $ACCEL"
  echo "nproc: $NPROC  eval device: $EVAL_DEVICE"
  nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv 2>&1 || true
  "$PY" - <<'PYV'
import importlib
for m in ("torch", "transformers", "accelerate", "trl", "peft", "datasets", "sqlalchemy"):
    try:
        print(m, importlib.import_module(m).__version__)
    except Exception as e:
        print(m, "MISSING", e)
import torch; print("cuda", torch.cuda.is_available(), torch.cuda.device_count())
PYV
} | tee "$OUT/env.txt"

step() {  # step NAME [launcher...]: run one stage, keep its log and manifest
  local stage="$1"; shift
  local t0; t0=$(date +%s)
  "$@" -m "steps.$stage" --recipe smoke --run "$RUN" "${SETS[@]}" --manifest-out "$OUT/$stage.manifest.json" \
      > "$OUT/$stage.log" 2>&1 || { echo "$stage FAILED (see $OUT/$stage.log)"; tail -30 "$OUT/$stage.log"; exit 1; }
  echo "$stage: $(( $(date +%s) - t0 )) s"
}

if [ "$NPROC" -gt 1 ]; then LAUNCH=("${ACCEL_BIN[@]}" --config_file "$ACCEL" --num_processes "$NPROC"); else LAUNCH=("$PY"); fi
step augment "$PY"
step sft "${LAUNCH[@]}"
step selfsup "$PY"
step crl "${LAUNCH[@]}"
cp "$KERNELRL_HOME/runs/$RUN/crl/metrics.jsonl" "$OUT/crl-metrics.jsonl" 2>/dev/null || true
nvidia-smi > "$OUT/nvidia-smi-after.txt" 2>&1 || true

"$PY" - "$OUT" <<'PYS' | tee "$OUT/summary.md"
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
sft = json.loads((out / "sft.manifest.json").read_text())
crl = json.loads((out / "crl.manifest.json").read_text())
tr = crl["metrics"]["training"]
print(f"# multi-GPU training check\n\n{(out / 'env.txt').read_text()}\n")
print(f"- sft: {sft['metrics']['steps']} steps on {sft['metrics']['examples']} examples, loss "
      f"{sft['metrics']['first_loss']} -> {sft['metrics']['last_loss']}, {sft['metrics']['train_s']} s")
print(f"- crl: {tr['steps']} GRPO steps, rewards {tr['reward_mean_per_step']}, time split {tr['timing']}, "
      f"{tr['tokens_per_s']} tok/s")
for line in (out / "crl-metrics.jsonl").read_text().splitlines():
    print("  -", line)
PYS
echo "results in $OUT"
