# Call 4 (nvidia-h100-x1, <= 200 s): minred_rotate.py in 8 fresh processes (the first builds the extension).
#   bash .calls/c4.sh 2>&1 | tee $OUT/c4.log      (carry [".whl", ".calls"])
CALL=c4 DEADLINE=${DEADLINE:-200}
source .calls/setup.sh
for i in 1 2 3 4 5 6 7 8; do
  (( $(left) < 20 )) && break
  timeout 100 python3 .calls/minred_rotate.py 202 2>&1 | tail -1
done
echo "call 4 ended at $((SECONDS - T0)) s"
