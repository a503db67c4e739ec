# Call 12 (nvidia-h200-x4, <= 230 s): version 14's fixes, verified where call 11 could not (its GPU-0 lane ran from
# /tmp by mistake): the tiny compile baseline through `kernelrl eval`; version 14's gpu test; 77 against itself
# twice; 33_VanillaRNN against itself; the red team's capture_stale and rnn_own_graph; then level-1 compile
# baselines on every GPU until the deadline.
CALL=c12 DEADLINE=${DEADLINE:-230}
source .calls/setup.sh
mkdir -p /tmp/c12 /tmp/ct /tmp/kbs
CSRC="baseline:compile baseline:compile-reduce-overhead"
CLAB="torch.compile,torch.compile reduce-overhead"
cat > /tmp/ct/relu.py <<'PY'
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x) * 2.0


def get_inputs():
    return [torch.randn(256, 4096)]


def get_init_inputs():
    return []
PY
python3 -c "
from kernelrl.reports.reference_baselines import _COMPILE
print(open('/tmp/ct/relu.py').read().rstrip() + '\n' + _COMPILE.replace('{mode!r}', 'None'))" > /tmp/ct/cand.py
( CUDA_VISIBLE_DEVICES=1 KERNELRL_REDTEAM_CLOCK=held timeout 100 python3 -m pytest -q -s -m gpu -p no:cacheprovider \
      tests/redteam/test_redteam_cuda.py -k "capture_stale or rnn_own_graph" > /tmp/c12/redteam_cuda.log 2>&1
  echo "redteam rc $? at $((SECONDS - T0)) s" | tee -a /tmp/c12/redteam_cuda.log
  kblane 1 l1comp2 1 "$(python3 .calls/todo.py 1 2/4 "$CLAB")" $CSRC ) > /tmp/c12/gpu1.log 2>&1 &
for g in 2 3; do
  ( kblane $g l1comp$((g + 1)) 1 "$(python3 .calls/todo.py 1 $((g + 1))/4 "$CLAB")" $CSRC ) > /tmp/c12/gpu$g.log 2>&1 &
done
( CUDA_VISIBLE_DEVICES=0 timeout 100 python3 -m kernelrl.cli eval /tmp/ct/relu.py /tmp/ct/cand.py --device cuda --json \
      > /tmp/c12/compile_tiny.json 2> /tmp/c12/compile_tiny.err
  echo "tiny compile eval rc $? at $((SECONDS - T0)) s"
  CUDA_VISIBLE_DEVICES=0 timeout 60 python3 -m pytest -q -s -m gpu -p no:cacheprovider tests/test_graph_safety.py \
      > /tmp/c12/gpu_tests.log 2>&1
  echo "gpu tests rc $? at $((SECONDS - T0)) s" | tee -a /tmp/c12/gpu_tests.log
  f=kb/level2/77_ConvTranspose3d_Scale_BatchNorm_GlobalAvgPool.py; c=/tmp/kbs/self_77.py
  { cat $f; printf '\n\nclass ModelNew(Model):\n    pass\n'; } > $c
  for i in 1 2; do CUDA_VISIBLE_DEVICES=0 timeout 60 python3 -m kernelrl.cli eval $f $c --device cuda --json \
      > /tmp/kbs/77_self_$i.json 2> /tmp/kbs/77_self_$i.err; echo "77 self $i rc $? at $((SECONDS - T0)) s"; done
  kblane 0 l3self 3 33_VanillaRNN baseline:self
) > /tmp/c12/gpu0.log 2>&1 &
wait
tail -3 /tmp/c12/gpu_tests.log; grep -E "^(capture_stale|\.?rnn_own_graph|\.capture_stale)|passed|failed" /tmp/c12/redteam_cuda.log | cut -c1-400; cat /tmp/c12/gpu*.log
for f in /tmp/c12/compile_tiny.json /tmp/kbs/*.json; do python3 -c "import json; r=json.load(open('$f')); t=r.get('timing') or {}; print('$f', r.get('speedup'), r.get('flags'), r.get('wall_s'), t.get('first_call_s'), t.get('graphs'), t.get('reference_variation'), (r.get('error') or '')[:800])" 2>&1 | tail -2; done
for n in l3self l1comp2 l1comp3 l1comp4; do grep -v "kernels scored" /tmp/kb/$n.log 2>/dev/null | grep "\[" | cut -c1-260; done
cp -r /tmp/kbs /tmp/c12/ 2>/dev/null; rm -f /tmp/c12/kbs/self_*.py
tar -C /tmp -czf "$OUT/c12.tgz" c12; tar -C /tmp -czf "$OUT/c12kb.tgz" --exclude='*/home' kb; ls -la "$OUT"; echo "call 12 ended at $((SECONDS - T0)) s"
