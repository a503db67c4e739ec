# Call 16 (next session, after c15; written 2026-12-06, not run): the CUDA red team at version 24 (c13 ran it at 23
# with a 300 s limit on a host still busy from c12: 15 of 20 passed, the rest cut), then level 2's self-pairs where
# c15 left them, then level 3's. Prepare as c15-next.sh says, c15's lane reports (raw/c15/*-report.json.gz from its
# tars) in .calls/done/ too; carry [".whl", ".calls", "kb/level2", "kb/level3"]:
#   bash .calls/c16.sh 2>&1 | tee $OUT/c16.log
CALL=c16 DEADLINE=${DEADLINE:-585}
source .calls/setup.sh
uptime
KERNELRL_REDTEAM_CLOCK=held timeout 420 python3 -m pytest -q -s -m gpu -p no:cacheprovider \
    tests/redteam/test_redteam_cuda.py > /tmp/c16-redteam.log 2>&1
echo "redteam rc $? at $((SECONDS - T0)) s"; grep -E "passed|failed|FAILED" /tmp/c16-redteam.log | cut -c1-300 | tail -6
grep -oE "^\.?[a-z_]+: success=[^ ]+ speedup=[^ ]+" /tmp/c16-redteam.log | head -30
gzip -c /tmp/c16-redteam.log > "$OUT/c16-redteam.log.gz"
CALL=c16b LVL=2 SRC=baseline:self LABELS="the reference itself" DEADLINE=$(( $(left) - 10 )) bash .calls/lane1.sh
# lane1.sh sourced setup.sh afresh (its own clock): this call's clock is T0 still
CALL=c16c LVL=3 SRC=baseline:self LABELS="the reference itself" DEADLINE=$(( $(left) - 10 )) bash .calls/lane1.sh
echo "call 16 ended at $((SECONDS - T0)) s"
