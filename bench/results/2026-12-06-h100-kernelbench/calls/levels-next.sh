# Levels in sequence on one GPU within one call (2026-12-07, after c19, which did this by hand): lane1.sh once per level
# of LVLS that todo.py still has work in, each lane given what is left of the call's DEADLINE, every lane's report and
# log packed into $OUT/$CALL-lanes.tar (lane1.sh re-packs /tmp/lanes_$CALL whole each time, so the tar holds them all).
# Prepare as ../README.md says (.calls/done/ = this folder's raw/c*/*-report.json.gz only); copy to .calls/levels.sh;
# carry [".whl", ".calls", "kb/levelN" for each N of LVLS]:
#   CALL=c20 LVLS="2 3" SRC=baseline:cuda-graph LABELS="reference in a CUDA graph" bash .calls/levels.sh 2>&1 | tee $OUT/c20.log
#   CALL=c22 LVLS="1 2 3" bash .calls/levels.sh 2>&1 | tee $OUT/c22.log     # both torch.compile modes (lane1.sh's default)
# Then, here: calls/post.sh c20 FILES_AT (one raw/c20/ for every level's lane), calls/summarize.sh.
CALL=${CALL:?name the call} LVLS=${LVLS:-"1 2 3"} BUDGET=${DEADLINE:-560}
SRC=${SRC:-"baseline:compile baseline:compile-reduce-overhead"}
LABELS=${LABELS:-"torch.compile,torch.compile reduce-overhead"}
S0=$SECONDS
for L in $LVLS; do
  left=$(( BUDGET - (SECONDS - S0) ))
  (( left > 90 )) || { echo "levels.sh: $left s left, level $L not started"; break; }
  if [ -z "$(python3 .calls/todo.py "$L" 1/1 "$LABELS" .calls/done/*.json .calls/done/*.json.gz 2>/dev/null)" ]; then
    echo "levels.sh: level $L has nothing left for $LABELS"; continue
  fi
  echo "levels.sh: level $L with $left s left"
  CALL=$CALL LVL=$L SRC=$SRC LABELS=$LABELS DEADLINE=$left bash .calls/lane1.sh
done
echo "levels.sh: $CALL ended at $(( SECONDS - S0 )) s of $BUDGET"
