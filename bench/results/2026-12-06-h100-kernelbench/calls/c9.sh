# Call 9: the H100 KernelBench table at version 22, level 1's references against themselves (lane1.sh), then the
# 35-task benchmark's rest if time is left. carry [".whl", ".calls", "kb/level1"]
#   bash .calls/c9.sh 2>&1 | tee $OUT/c9.log
CALL=${CALL:-c9} LVL=1 SRC=baseline:self LABELS="the reference itself" DEADLINE=${DEADLINE:-575} bash .calls/lane1.sh
