# Call 7 (2026-12-06): call 6 repeated call 5's lower honest red-team scores on a quiet host at 22 (5 ms empty hold;
# go holds read ~5 ms where 21 read 2.7). The same three cases with the empty hold back at 1 ms (quartile kept),
# then the uncapturable pair among 16 busy loops.
CALL=c7 DEADLINE=${DEADLINE:-170}
source .calls/setup.sh
uptime; grep -n "^EMPTY_HOLD_S" kernelrl/evaluation/held.py
KERNELRL_REDTEAM_CLOCK=held timeout 80 python3 -m pytest -q -s -m gpu -p no:cacheprovider tests/redteam/test_redteam_cuda.py \
    -k "early_done or honest_cuda_graph or honest_host_sync" 2>&1 | grep -E "success=|passed|failed" | cut -c1-300
echo "red team at $((SECONDS - T0)) s"
for i in $(seq 16); do ( timeout 40 sh -c 'while :; do :; done' ) & done
sleep 1; timeout 60 python3 .calls/probe_k.py 2 busy16-h1q 2>&1 | grep -E "speedup" | cut -c1-700
echo "call 7 ended at $((SECONDS - T0)) s"
