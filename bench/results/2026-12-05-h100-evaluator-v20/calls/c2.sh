# Call 2 (nvidia-h100-x1, <= 585 s): the 35-task benchmark goes on where call 1 stopped (13 rows in .calls/done/,
# call 1's rows.jsonl); the tasks left have no extension to build (call 1's prebuild list was all done).
#   bash .calls/c2.sh 2>&1 | tee $OUT/c2.log      (carry [".whl", ".calls"])
CALL=c2 DEADLINE=${DEADLINE:-585}
source .calls/setup.sh
blane 3 3
echo "call 2 ended at $((SECONDS - T0)) s"
