#!/usr/bin/env bash
# Prepare a fresh checkout for this folder's device calls (what ../README.md lists step by step), from the repository
# root; every path it writes is ignored by git. Safe to run again: .calls/done/ is rebuilt from raw/ each time.
#   bash bench/results/2026-12-06-h100-kernelbench/calls/prepare.sh
# Then a call as ../README.md's "Next" says (carry [".whl", ".calls", "kb/levelN"...]), and after it post.sh and
# summarize.sh. It ends by printing what is left per level for each label, from todo.py.
set -euo pipefail
K=bench/results/2026-12-06-h100-kernelbench
V=bench/results/2026-12-06-h100-evaluator-v21/calls
[ -d "$K" ] && [ -d "$V" ] || { echo "prepare.sh: run it from the repository root" >&2; exit 2; }
[ -d ../shared/kernelbench/level1 ] || { echo "prepare.sh: ../shared/kernelbench is missing (the tasks)" >&2; exit 2; }
# the carried site packages (~31 MB; the device image lacks prefect, sqlalchemy, ...), built once
[ -s .whl/site.tar.xz ] || bash bench/gpu_site.sh
mkdir -p .git/info
for p in /.whl/ /.calls/ /kb; do grep -qxF "$p" .git/info/exclude 2>/dev/null || echo "$p" >> .git/info/exclude; done
[ -e kb ] || ln -sfn ../shared/kernelbench kb
mkdir -p .calls/done
cp "$V/setup.sh" "$V/lane1.sh" .calls/
cp "$V/todo.py.txt" .calls/todo.py
for f in "$K"/calls/*-next.sh; do cp "$f" ".calls/$(basename "$f" -next.sh).sh"; done  # c20-next.sh -> c20.sh, ...
# this folder's lane reports only: the H200 folder's and evaluator-v20/v21's hold baseline rows of other devices or
# versions, which todo.py would count as done
rm -f .calls/done/*
cp "$K"/raw/c*/*-report.json.gz .calls/done/
echo "prepare.sh: .calls holds $(ls .calls | tr '\n' ' ')"
echo "prepare.sh: $(ls .calls/done | wc -l) lane reports in .calls/done; tasks left per level:"
for lab in "the reference itself" "reference in a CUDA graph" "torch.compile,torch.compile reduce-overhead"; do
  for L in 1 2 3; do
    n=$(python3 .calls/todo.py "$L" 1/1 "$lab" .calls/done/*.json.gz | tr ',' '\n' | grep -c . || true)
    echo "  $lab, level $L: $n"
  done
done
