# Call 13 (next session, after c12; written 2026-12-06, not run): the CUDA red team at version 23 (its digests and
# blocks of small outputs are 22's; the one-span path and chunked digests are new), then level 2's self-pairs where
# c12 left them. Prepare as c12-next.sh says, c12's lane reports (raw/c12/*-report.json.gz from its tars) in
# .calls/done/; carry [".whl", ".calls", "kb/level2"]:
#   bash .calls/c13.sh 2>&1 | tee $OUT/c13.log
CALL=c13 DEADLINE=${DEADLINE:-585}
source .calls/setup.sh
uptime
KERNELRL_REDTEAM_CLOCK=held timeout 300 python3 -m pytest -q -s -m gpu -p no:cacheprovider \
    tests/redteam/test_redteam_cuda.py > /tmp/c13-redteam.log 2>&1
echo "redteam rc $? at $((SECONDS - T0)) s"; grep -E "passed|failed|FAILED" /tmp/c13-redteam.log | cut -c1-300 | tail -6
grep -oE "^\.?[a-z_]+: success=[^ ]+ speedup=[^ ]+" /tmp/c13-redteam.log | head -30
gzip -c /tmp/c13-redteam.log > "$OUT/c13-redteam.log.gz"
CALL=c13b LVL=2 SRC=baseline:self LABELS="the reference itself" DEADLINE=$(( $(left) - 10 )) bash .calls/lane1.sh
echo "call 13 ended at $((SECONDS - T0)) s"
