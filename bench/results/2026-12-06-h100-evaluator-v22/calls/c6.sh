# Call 6 (2026-12-06, second H100 session, ~250 s of device time left): call 5's red team ran slow (timed out at 240 s
# after 8 cases) and three honest cases read lower than at 21 (early_done 1.32 vs 2.47, honest_cuda_graph 0.99 vs
# 1.5, honest_host_sync 0.33 vs 0.44) with 0.45 ms quiesce waits (0.002 at 21): a loaded host (call 5's busy loops
# outliving their pkill?) or version 22? These three cases on a fresh machine, the host's load printed first.
CALL=c6 DEADLINE=${DEADLINE:-200}
source .calls/setup.sh
uptime; ps -eo pcpu,etime,args --sort=-pcpu | head -5 | cut -c1-150
KERNELRL_REDTEAM_CLOCK=held timeout 150 python3 -m pytest -q -s -m gpu -p no:cacheprovider tests/redteam/test_redteam_cuda.py \
    -k "early_done or honest_cuda_graph or honest_host_sync" 2>&1 | grep -E "success=|passed|failed" | cut -c1-420
echo "call 6 ended at $((SECONDS - T0)) s"; uptime
