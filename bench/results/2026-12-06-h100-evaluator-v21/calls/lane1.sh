# (2026-12-06: lane reports and logs go into $OUT/$CALL-lanes.tar, one file however many lanes a call runs.)
# One lane on a single GPU (a lone nvidia-h200, when that is all that is lent; c19, c22, c23 ran this way):
# kernelrl bench over one level's tasks that .calls/done/ does not already hold for every label, for the given
# sources, task by task (every source of a task before the next), until DEADLINE. Prepare as c9.sh's header says;
# carry [".whl", ".calls", "kb/level$LVL"]; put the earlier lanes' reports (raw/cN/*-report.json.gz, or a
# summary's rows.json.gz) into .calls/done/ first. Commit $OUT's <lane>-report.json.gz under raw/$CALL/.
#   CALL=c24 LVL=1 bash .calls/lane1.sh 2>&1 | tee $OUT/c24.log                # both torch.compile modes
#   CALL=c24 LVL=2 SRC=baseline:self LABELS="the reference itself" bash .calls/lane1.sh ...   # self-pairs
CALL=${CALL:?name the call} DEADLINE=${DEADLINE:-560} LVL=${LVL:-1}
SRC=${SRC:-"baseline:compile baseline:compile-reduce-overhead"}
LABELS=${LABELS:-"torch.compile,torch.compile reduce-overhead"}
source .calls/setup.sh
LANE=l${LVL}$CALL
# shellcheck disable=SC2086  # SRC is a list of sources
kblane 0 "$LANE" "$LVL" "$(python3 .calls/todo.py "$LVL" 1/1 "$LABELS" .calls/done/*.json .calls/done/*.json.gz)" $SRC
grep -v "kernels scored" "/tmp/kb/$LANE.log" | grep "\[" | cut -c1-400 | tail -40
# The device tool returns 8 files a call (2026-12-06, c2 lost its third lane's report): every lane's report and log
# go into one tar per call, appended lane by lane, so a call cut short still returns what its lanes finished.
# (a lane with no tasks writes no report: nothing packed for it; 2026-12-07 c16b packed an empty .gz, which todo.py
# and kernelbench_summary.py could not read)
mkdir -p /tmp/lanes_$CALL
[ -s "/tmp/kb/$LANE/report/report.json" ] && \
    gzip -c "/tmp/kb/$LANE/report/report.json" > "/tmp/lanes_$CALL/$LANE-report.json.gz"
cp "/tmp/kb/$LANE.log" "/tmp/lanes_$CALL/"
tar -C /tmp -cf "$OUT/$CALL-lanes.tar" "lanes_$CALL"
# Where each evaluation's wall time went (version 18 imports torch.compile's modules in the worker's warm-up: the
# build phase was a median 7.2 s of 16.2 s at version 16)
python3 - "/tmp/kb/$LANE/report/report.json" <<'PY' 2>&1 | tail -4
import json, statistics as st, sys
for src in json.load(open(sys.argv[1])).get("sources", []):
    rows = [r for r in src.get("rows", []) if r.get("timing")]
    if rows:
        ph = lambda k: st.median((r["timing"].get("phases_s") or {}).get(k, 0) for r in rows)
        pre = [r["timing"].get("compiler_preimport_s") for r in rows]
        print(src.get("label"), len(rows), "rows: median wall", st.median(r.get("wall_s") or 0 for r in rows),
              "start", ph("start"), "build", ph("build"), "correctness", ph("correctness"), "spares",
              st.median(r["timing"].get("spare_workers_used") or 0 for r in rows), "preimported",
              sum(p is not None for p in pre), "of", len(pre))
PY
ls -la "$OUT"; echo "call $CALL ended at $((SECONDS - T0)) s"
