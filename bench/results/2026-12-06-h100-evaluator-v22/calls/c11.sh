CALL=${CALL:-c11} DEADLINE=${DEADLINE:-270}
source .calls/setup.sh
uptime
blane 3 3
echo "call $CALL ended at $((SECONDS - T0)) s"
