# Call 4 (next session, one H100 if it comes, else an H200 and say so; <= 585 s), written, not run.
# Prepare: .whl (bash bench/gpu_site.sh); setup.sh, this file (as c4.sh), next_probe.py.txt (as probe_k.py) into
# .calls/; raw/c3/rows.jsonl into .calls/done/rows.jsonl; echo <commit> > .calls/commit; carry [".whl", ".calls"].
#   bash .calls/c4.sh 2>&1 | tee $OUT/c4.log
# (1) First, on the fresh machine (c3's 4.34 was the first evaluation of a fresh one, with nvcc building beside it):
#     the probe, three evaluations of the uncapturable pair on a quiet host and three with the prebuild beside
#     them, with k, the span overhead, every block's empty spans and whether the cap bound (in call 3 the other two
#     evaluations beside the prebuild were normal: 1.03 and 1.97).
#     If the cap binds where the empty spans are long in a few blocks only, taking their minimum (not the median)
#     is the candidate fix (subtracting less keeps ratios toward 1); if they are long in every block, the empty
#     span's fixed hold (held.EMPTY_HOLD_S) does not cover a slow host: size it as the side's own holds are.
# (2) The extensions, then the 35-task benchmark's other 24 tasks at 21 (blane resumes from rows.jsonl).
CALL=c4 DEADLINE=${DEADLINE:-585}
source .calls/setup.sh
mkdir -p /tmp/c4
timeout 100 python3 .calls/probe_k.py 3 > /tmp/c4/probe_quiet.log 2>&1
echo "probe (quiet host) rc $? at $((SECONDS - T0)) s"; grep -E "^[0-9] speedup" /tmp/c4/probe_quiet.log | cut -c1-2500
# the same with nvcc building the benchmark's extensions beside it, as in call 3
( python3 bench/evaluator_bench.py --device cuda:0 --out-dir /tmp/ebw/bench --prebuild-only > /tmp/c4/prebuild.log 2>&1
  echo "prebuild rc $? at $((SECONDS - T0)) s" >> /tmp/c4/prebuild.log ) &
PB=$!
sleep 3; timeout 100 python3 .calls/probe_k.py 3 > /tmp/c4/probe_loaded.log 2>&1
echo "probe (nvcc beside it) rc $? at $((SECONDS - T0)) s"; grep -E "^[0-9] speedup" /tmp/c4/probe_loaded.log | cut -c1-2500
wait $PB; tail -1 /tmp/c4/prebuild.log
tar -C /tmp -czf "$OUT/c4-probe.tgz" c4
blane 3 3
echo "call 4 ended at $((SECONDS - T0)) s"
