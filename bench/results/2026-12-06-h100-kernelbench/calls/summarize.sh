#!/usr/bin/env bash
# The folder's table as it stands (issue 32 item 3's summary.json, tasks.md, rows.json.gz at the folder's root):
# every call's lane reports (raw/c*/*-report.json.gz) merged in the order they were made, a later row of a task and
# source over an earlier one (c15a/b at version 25 over c15n/o at 24), self-pairs and baselines alike. Run from the
# repository root after post.sh:
#   bash bench/results/2026-12-06-h100-kernelbench/calls/summarize.sh
set -euo pipefail
ROOT=$PWD
PY=${PY:-$( [ -x .venv/bin/python ] && echo "$ROOT/.venv/bin/python" || echo python3 )}
cd "$(dirname "$0")/.."  # paths in rows.json.gz's "inputs" relative to the folder
"$PY" "$ROOT/bench/kernelbench_summary.py" --by-created raw/c*/*-report.json.gz --out .
