# Call 20 (nvidia-h200, <= 330 s): the CUDA red team in full at cb88ae5 (ipc imports torch lazily, the device
# count from the driver, spares.take with a wait: every evaluation path), after c18/c19 ran the changed code.
CALL=${CALL:-c20} DEADLINE=${DEADLINE:-330}
source .calls/setup.sh
KERNELRL_REDTEAM_CLOCK=held timeout 320 python3 -m pytest -q -s -m gpu -p no:cacheprovider tests/redteam/test_redteam_cuda.py \
    > "$OUT/redteam_cuda.log" 2>&1
echo "redteam rc $? at $((SECONDS - T0)) s"; grep -E "passed|failed|PASS|FAIL|score|speedup" "$OUT/redteam_cuda.log" | tail -40
