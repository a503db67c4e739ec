# Call 28 (written 2026-12-07, seventh session, after c26-c27): the device comparison's profile, then both
# torch.compile modes where todo.py says. Prepare with calls/prepare.sh (every earlier call posted); carry
# [".whl", ".calls", "kb/level1", "kb/level2", "kb/level3"]:
#   bash .calls/c28.sh 2>&1 | tee $OUT/c28.log
# Why the profile: the reference worker's comparison of 6.4 GB outputs took 2.0-3.0 s of a 10-15 s evaluation on
# the level-1 activations and norms (c25-c27), ~0.7 s a set where reading both outputs is ~4 ms; bench/
# compare_profile.py says whether the time is the chunk loop's kernels and syncs, the mapped (IPC) memory, or the
# allocator near a full device, before anything in compare.py changes, and times a one-pass comparison with the same verdicts beside it (~50 s). Later calls: CALL=c29 PROFILE=0.
CALL=${CALL:-c28} DEADLINE=${DEADLINE:-585} PROFILE=${PROFILE:-1}
export CALL
source .calls/setup.sh
if [ "$PROFILE" = 1 ]; then
  timeout 150 python3 bench/compare_profile.py --device cuda --sizes-mib 64,1024,6144 --reps 3 \
      --json "$OUT/$CALL-compare-profile.json" 2>&1 | cut -c1-400
  echo "compare profile rc ${PIPESTATUS[0]} at $((SECONDS - T0)) s"
fi
LVLS="1 2 3" DEADLINE=$(( DEADLINE - (SECONDS - T0) )) bash .calls/levels.sh
echo "call $CALL ended at $((SECONDS - T0)) s"
