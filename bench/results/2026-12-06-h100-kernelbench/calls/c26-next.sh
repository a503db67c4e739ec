# Call 26 (written 2026-12-07, sixth session, after c24-c25): the CUDA red team on the reward's clock (held: the
# test file's default since 5109884; c25 ran it on version 6's host clock by mistake), then both torch.compile modes
# where todo.py says. Prepare with calls/prepare.sh (post every earlier call first: c25 repeated c24's tasks because
# c24's reports were not yet in .calls/done); carry [".whl", ".calls", "kb/level1", "kb/level2", "kb/level3"] (a
# level not carried has no tasks there: todo.py lists kb/levelL):
#   bash .calls/c26.sh 2>&1 | tee $OUT/c26.log
# Later calls: CALL=c27 bash .calls/c26.sh ... with RED=0 (the red team once a session is enough).
CALL=${CALL:-c26} DEADLINE=${DEADLINE:-585} RED=${RED:-1}
export CALL
source .calls/setup.sh
if [ "$RED" = 1 ]; then
  # the sixth session's GPU test: a result answered before torch's import names the device as torch does
  timeout 120 python3 -m pytest -q -p no:cacheprovider \
      "tests/test_evaluator_start.py::test_the_drivers_device_name_is_the_one_torch_reports" 2>&1 | tail -3
  timeout 300 python3 -m pytest -q -s -m gpu -p no:cacheprovider tests/redteam/test_redteam_cuda.py \
      > "/tmp/$CALL-redteam.log" 2>&1
  echo "redteam rc $? at $((SECONDS - T0)) s"
  grep -E "passed|failed|FAILED" "/tmp/$CALL-redteam.log" | cut -c1-300 | tail -8
  grep -oE "^\.?[a-z_]+: success=[^ ]+ speedup=[^ ]+" "/tmp/$CALL-redteam.log" | head -30
  gzip -c "/tmp/$CALL-redteam.log" > "$OUT/$CALL-redteam.log.gz"
fi
LVLS="1 2 3" DEADLINE=$(( DEADLINE - (SECONDS - T0) )) bash .calls/levels.sh
echo "call $CALL ended at $((SECONDS - T0)) s"
