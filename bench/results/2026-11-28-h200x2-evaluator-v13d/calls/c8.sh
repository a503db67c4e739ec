# Call 8 (nvidia-h200-x2, the session's last ~150 s): the in-place replay staging on a GPU: the gpu test of equal
# values, then the one level-1 self-pair that still failed out-of-memory (45_Average_Pooling_2D).
CALL=c8 DEADLINE=${DEADLINE:-80}
source .calls/setup.sh
CUDA_VISIBLE_DEVICES=1 timeout 60 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_worker_inputs.py 2>&1 | tail -4 > "$OUT/gpu_tests.log" &
CUDA_VISIBLE_DEVICES=0 kbself 45_Average_Pooling_2D 70
wait
cat "$OUT/gpu_tests.log"
python3 -c "import json; r=json.load(open('/tmp/kbs/45_Average_Pooling_2D.json')); t=r.get('timing') or {}; print(r.get('speedup'), r.get('flags'), r.get('wall_s'), t.get('phases_s'), t.get('trimmed_mib'), t.get('graphs'), (r.get('error') or '')[:1500])" 2>&1 | tee "$OUT/avgpool.txt"
cp /tmp/kbs/45_Average_Pooling_2D.json "$OUT/" 2>/dev/null; echo "call 8 ended at $((SECONDS - T0)) s"
