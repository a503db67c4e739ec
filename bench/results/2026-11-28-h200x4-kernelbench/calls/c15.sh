# Call 15 (2026-11-28, second session, nvidia-h200-x4, <= 540 s): evaluator version 15 (each timing block restarts
# both sides' random generators, worker_inputs.restart_generators) after call 13b's 66_Matmul_Dropout_Softmax
# self-pair failed timing-mismatch at v14. GPU 0: the GPU tests of the change and of graph safety, then the two
# level-2 dropout tasks against themselves. GPU 1: the full CUDA red team (c13's run hit its 280 s limit with 17
# passed). GPU 2: level 3's two tasks c13b left unevaluated and the ones that draw in forward (stochastic depth,
# dropout). GPU 3: 66 again and a level-1 sample (deterministic: v15 changes nothing there). Prepared as c9.sh's
# header says; carry [".whl", ".calls", "kb/level1", "kb/level2", "kb/level3"].
CALL=${CALL:-c15} DEADLINE=${DEADLINE:-540}
source .calls/setup.sh
mkdir -p /tmp/$CALL
( CUDA_VISIBLE_DEVICES=0 timeout 200 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_block_generators.py \
      tests/test_graph_safety.py > /tmp/$CALL/gpu_tests.log 2>&1
  echo "gpu tests rc $? at $((SECONDS - T0)) s"; tail -3 /tmp/$CALL/gpu_tests.log
  kblane 0 l2drop0 2 66_Matmul_Dropout_Softmax,83_Conv3d_GroupNorm_Min_Clamp_Dropout baseline:self ) > /tmp/gpu0.log 2>&1 &
( KERNELRL_REDTEAM_CLOCK=held CUDA_VISIBLE_DEVICES=1 timeout 480 python3 -m pytest -q -s -m gpu -p no:cacheprovider \
      tests/redteam/test_redteam_cuda.py > /tmp/$CALL/redteam_cuda.log 2>&1
  echo "redteam rc $? at $((SECONDS - T0)) s"; tail -3 /tmp/$CALL/redteam_cuda.log ) > /tmp/gpu1.log 2>&1 &
( kblane 2 l3self2 3 46_NetVladWithGhostClusters,50_ReLUSelfAttention,29_SwinMLP,30_SwinTransformerV2,28_VisionTransformer \
      baseline:self ) > /tmp/gpu2.log 2>&1 &
( kblane 3 l2drop3 2 66_Matmul_Dropout_Softmax baseline:self
  kblane 3 l1self3 1 1_Square_matrix_multiplication_,23_Softmax,40_LayerNorm,95_CrossEntropyLoss baseline:self ) > /tmp/gpu3.log 2>&1 &
wait
cat /tmp/gpu*.log; for f in /tmp/kb/*.log; do grep -v "kernels scored" $f | grep "\[" | cut -c1-300; done
cp /tmp/$CALL/*.log "$OUT/" 2>/dev/null; tar -C /tmp -czf "$OUT/${CALL}kb.tgz" --exclude='*/home' kb; ls -la "$OUT"; echo "call $CALL ended at $((SECONDS - T0)) s"
