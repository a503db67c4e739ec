#!/usr/bin/env bash
# A code snapshot for device calls: HEAD's kernelrl/, flows/, steps/, recipes/ and pyproject.toml in .gpurun/ (ignored;
# name it in the call's carry), with the egg-info that registers `kernelrl pipeline` (the kernelrl.cli entry point)
# and COMMIT. Why: the working tree travels with every call, uncommitted edits of others included; the run must
# be of one known commit. ~2 MB beside the 64 MiB working-tree limit.
#   bench/gpu_snapshot.sh && cat .gpurun/COMMIT
set -euo pipefail
cd "$(dirname "$0")/.."
rm -rf .gpurun && mkdir -p .gpurun
git archive HEAD kernelrl flows steps recipes pyproject.toml | tar -x -C .gpurun
cp -r kernelrl.egg-info .gpurun/ 2>/dev/null || { echo "run make setup first (it writes kernelrl.egg-info)"; exit 1; }
git log -1 --format='snapshot commit %H %s' > .gpurun/COMMIT
du -sh .gpurun; cat .gpurun/COMMIT
