# Call 6 (next session, written, not run; nvidia-h100-x1 when lent, v11's own kind; <= 420 s): issue 34 item 5's
# one outlier, the MoE task, v13 and v11 code alternately on one GPU and host (ABAB), short enough for v11 to
# finish (it writes its row only after all repeats and the long run: ~13 s an evaluation on the H100).
# Before the call, here:  git worktree add /tmp/v11wt 210291d && mkdir -p .calls/v11/bench &&
#   cp -r /tmp/v11wt/kernelrl /tmp/v11wt/pyproject.toml .calls/v11/ && cp /tmp/v11wt/bench/*.py .calls/v11/bench/
# then carry [".whl", ".calls"].
CALL=c6 DEADLINE=${DEADLINE:-420}
source .calls/setup.sh
mkdir -p /tmp/c6
run_moe() {  # run_moe VERSION ROUND TIMEOUT
  local d=$ROOT; [ "$1" = v11 ] && d=$ROOT/.calls/v11
  ( cd "$d" && PYTHONPATH="$d" KERNELRL_HOME=/tmp/krl-$1 timeout "$3" python3 bench/evaluator_bench.py --device cuda:0 \
      --out-dir /tmp/c6/moe-$1-$2 --no-prebuild --only 31 --repeats 3 --long-factor 3 --clock held \
      --max-wall-s 60 --max-minutes 1.0 > /tmp/c6/moe-$1-$2.log 2>&1 )
  echo "moe $1 round $2 rc $? at $((SECONDS - T0)) s"; grep -h MoE /tmp/c6/moe-$1-$2/table.md 2>/dev/null
}
( sleep 60; spydump v11-60 ) &
run_moe v11 1 110; run_moe cur 1 80; run_moe v11 2 110; run_moe cur 2 80
wait
cp -r /tmp/spy /tmp/c6/ 2>/dev/null; tar -C /tmp -czf "$OUT/c6.tgz" c6; ls -la "$OUT"; echo "call 6 ended at $((SECONDS - T0)) s"
