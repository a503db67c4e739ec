# Call 13 (next session; nvidia-h200-x4 or an H100 x4, <= 540 s), written, not run: the final self-pair pass at
# one commit (evaluator version 14), every KernelBench task against itself, one quarter of each level per GPU,
# levels 1, 2, 3 in turn. ~250 evaluations at a median 8.8 s: about 9-10 min on four GPUs, so expect two calls:
# copy the first call's lane reports (report.json) into .calls/done/ (named apart, e.g. c13-l1self0.json) and run
# this again; todo.py leaves out what they hold. REDTEAM=1 on the first call runs the full CUDA red team on GPU 1
# first. Prepare as c9.sh's header says (site, py-spy, kb link, setup.sh,
# todo.py); carry [".whl", ".calls", "kb/level1", "kb/level2", "kb/level3"]. Merge with bench/kernelbench_summary.py
# over these lanes only (one commit), into bench/results/<date>-<kind>-kernelbench/summary.json.
CALL=${CALL:-c13} DEADLINE=${DEADLINE:-540}
source .calls/setup.sh
mkdir -p /tmp/$CALL
for g in 0 1 2 3; do
  ( if [ "$g" = 1 ] && [ -n "${REDTEAM:-}" ]; then  # REDTEAM=1 in the first call: the full CUDA red team first
      KERNELRL_REDTEAM_CLOCK=held CUDA_VISIBLE_DEVICES=1 timeout 280 python3 -m pytest -q -s -m gpu -p no:cacheprovider \
          tests/redteam/test_redteam_cuda.py > /tmp/$CALL/redteam_cuda.log 2>&1
      echo "redteam rc $? at $((SECONDS - T0)) s"; tail -3 /tmp/$CALL/redteam_cuda.log
    fi
    for L in 1 2 3; do
      kblane $g l${L}self$g $L "$(python3 .calls/todo.py $L 1/1 "the reference itself" .calls/done/*.json | python3 -c "import sys; t=[x for x in sys.stdin.read().strip().split(',') if x]; print(','.join(t[$g::4]))")" \
          baseline:self
    done ) > /tmp/gpu$g.log 2>&1 &
done
wait
cat /tmp/gpu*.log; for f in /tmp/kb/*.log; do grep -v "kernels scored" $f | grep "\[" | grep -v " 1.0[0-2]x$\| 0.9[89]x$" | cut -c1-300; done
cp /tmp/$CALL/redteam_cuda.log "$OUT/" 2>/dev/null; tar -C /tmp -czf "$OUT/${CALL}kb.tgz" --exclude='*/home' kb; ls -la "$OUT"; echo "call $CALL ended at $((SECONDS - T0)) s"
