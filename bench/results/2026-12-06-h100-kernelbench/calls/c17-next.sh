# Call 17 (next session, after c16; written 2026-12-06, not run): level 2's self-pairs where c16 left them, then
# level 3's. Prepare as c15-next.sh says, with c15's and c16's lane reports in .calls/done/; carry
# [".whl", ".calls", "kb/level2", "kb/level3"]:
#   bash .calls/c17.sh 2>&1 | tee $OUT/c17.log
CALL=c17 DEADLINE=${DEADLINE:-585}
source .calls/setup.sh
uptime
CALL=c17a LVL=2 SRC=baseline:self LABELS="the reference itself" DEADLINE=$(( $(left) - 10 )) bash .calls/lane1.sh
CALL=c17b LVL=3 SRC=baseline:self LABELS="the reference itself" DEADLINE=$(( $(left) - 10 )) bash .calls/lane1.sh
echo "call 17 ended at $((SECONDS - T0)) s"
