# One lane per GPU of the machine (written 2026-12-06 for an nvidia-h100-x4 or -x2, when one is lent; not yet run):
# kernelrl bench over each level of LVLS in turn, the level's tasks still to run split K/N by index between the
# GPUs (todo.py), every lane stopping by DEADLINE. Same preparation as lane1.sh (setup.sh, lane1.sh, todo.py from
# ../../2026-12-06-h100-evaluator-v21/calls/; this file as .calls/lanes.sh; bash bench/gpu_site.sh; .calls/done/ =
# every raw/cN/*-report.json.gz here), carry [".whl", ".calls", "kb/level2", "kb/level3"] (the levels named):
#   CALL=c18 LVLS="2 3" SRC=baseline:self LABELS="the reference itself" bash .calls/lanes.sh 2>&1 | tee $OUT/c18.log
#   CALL=c19 LVLS="1 2 3" SRC=baseline:cuda-graph LABELS="reference in a CUDA graph" bash .calls/lanes.sh ...
#   CALL=c20 LVLS="1 2 3" bash .calls/lanes.sh ...        # both torch.compile modes (lane1.sh's default SRC)
# Returns one tar (every lane's report and log, packed as each lane ends) and the call's env file: commit the
# reports under raw/$CALL/ and put them into .calls/done/ before the next call. GPUS="1 2 3": those GPUs only (a
# call that sources this file in a subshell beside other work on GPU 0, setup.sh already sourced: c15-next.sh on several GPUs).
CALL=${CALL:?name the call} DEADLINE=${DEADLINE:-560} LVLS=${LVLS:-"2 3"}
SRC=${SRC:-"baseline:compile baseline:compile-reduce-overhead"}
LABELS=${LABELS:-"torch.compile,torch.compile reduce-overhead"}
declare -F kblane > /dev/null || source .calls/setup.sh  # sourced by a call that set up already: its /tmp/kb stays
read -r -a G <<< "${GPUS:-$(seq -s ' ' 0 $(( $(nvidia-smi -L | wc -l) - 1 )))}"
N=${#G[@]}
echo "$N GPUs (${G[*]}); levels $LVLS; sources $SRC; deadline $DEADLINE s"
mkdir -p "/tmp/lanes_$CALL"
pack() {  # pack LANE: its report and log into the call's tar (appended: a call cut short keeps finished lanes)
  [ -f "/tmp/kb/$1/report/report.json" ] && gzip -c "/tmp/kb/$1/report/report.json" > "/tmp/lanes_$CALL/$1-report.json.gz"
  cp "/tmp/kb/$1.log" "/tmp/lanes_$CALL/" 2>/dev/null
  flock /tmp/lanes_$CALL.lock tar -C /tmp -cf "$OUT/$CALL-lanes.tar" "lanes_$CALL"
}
for k in $(seq 1 "$N"); do
  g=${G[$((k - 1))]}
  (
    for lvl in $LVLS; do
      lane=l${lvl}${CALL}g$g
      # shellcheck disable=SC2086  # SRC is a list of sources
      kblane "$g" "$lane" "$lvl" "$(python3 .calls/todo.py "$lvl" "$k/$N" "$LABELS" .calls/done/*.json \
          .calls/done/*.json.gz)" $SRC
      pack "$lane"
    done
  ) > "/tmp/lanes_$CALL/gpu$g.txt" 2>&1 &
done
wait
cat /tmp/lanes_"$CALL"/gpu*.txt
for f in /tmp/kb/l*"$CALL"g*.log; do grep -v "kernels scored" "$f" | grep "\[" | cut -c1-300 | tail -12; done
ls -la "$OUT"; echo "call $CALL ended at $((SECONDS - T0)) s"
