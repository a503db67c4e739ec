# Call 11 (nvidia-h200-x4, <= 500 s) at the version-14 commit: what changed, verified; the torch.compile baselines
# diagnosed and, when a tiny compile evaluation passes, run over level 1.
#   GPU 0: the compile diagnosis (a fresh uid compiling on its own; a tiny task's compile baseline through
#          `kernelrl eval`); version 14's gpu test (a reference that rebinds its state); L3 33_VanillaRNN and
#          L2 77 against themselves (77 twice through `kernelrl eval`); then compile baselines, level 1, quarter 1.
#   GPU 1: the CUDA red team in full at this code; then compile baselines, level 1, quarter 2.
#   GPU 2, 3: compile baselines, level 1, quarters 3 and 4, once GPU 0 says a compile evaluation passes (else
#          level-2 CUDA-graph baselines).
CALL=c11 DEADLINE=${DEADLINE:-500}
source .calls/setup.sh
mkdir -p /tmp/c11 /tmp/ct /tmp/kbs
CSRC="baseline:compile baseline:compile-reduce-overhead"
CLAB="torch.compile,torch.compile reduce-overhead"
waitflag() { for _ in $(seq 60); do [ -e /tmp/c11/compile_ok ] || [ -e /tmp/c11/compile_bad ] && break; sleep 2; done; }
( CUDA_VISIBLE_DEVICES=1 KERNELRL_REDTEAM_CLOCK=held timeout 280 python3 -m pytest -q -s -m gpu -p no:cacheprovider \
      tests/redteam/test_redteam_cuda.py > /tmp/c11/redteam_cuda.log 2>&1
  echo "redteam rc $? at $((SECONDS - T0)) s" | tee -a /tmp/c11/redteam_cuda.log
  kblane 1 l1comp2 1 "$(python3 .calls/todo.py 1 2/4 "$CLAB")" $CSRC ) > /tmp/c11/gpu1.log 2>&1 &
for g in 2 3; do
  ( waitflag
    if [ -e /tmp/c11/compile_ok ]; then kblane $g l1comp$((g + 1)) 1 "$(python3 .calls/todo.py 1 $((g + 1))/4 "$CLAB")" $CSRC
    else kblane $g l2graph$g 2 "$(python3 .calls/todo.py 2 $((g - 1))/2 "reference in a CUDA graph")" baseline:cuda-graph; fi
  ) > /tmp/c11/gpu$g.log 2>&1 &
done
( cd /tmp && CUDA_VISIBLE_DEVICES=0 HOME=/tmp timeout 150 python3 - > /tmp/c11/compile_uid.log 2>&1 <<'PY'
import os, sys, traceback
os.setgroups([]); os.setgid(3456789); os.setuid(3456789)
print("uid", os.getuid(), "cwd", os.getcwd(), "py", sys.version.split()[0])
try:
    import torch
    import torch._inductor.config as c
    print("inductor config imported; compile_threads", c.compile_threads)
    f = torch.compile(lambda x: torch.relu(x) * 2.0)
    print("compiled:", f(torch.randn(8, device="cuda")).shape)
except Exception:
    traceback.print_exc()
PY
  echo "fresh-uid compile rc $? at $((SECONDS - T0)) s"
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
  CUDA_VISIBLE_DEVICES=0 timeout 150 python3 -m kernelrl.cli eval /tmp/ct/relu.py /tmp/ct/cand.py --device cuda --json \
      > /tmp/c11/compile_tiny.json 2> /tmp/c11/compile_tiny.err
  echo "tiny compile eval rc $? at $((SECONDS - T0)) s"
  if python3 -c "import json,sys; r=json.load(open('/tmp/c11/compile_tiny.json')); sys.exit(0 if r.get('success') else 1)"; then
    touch /tmp/c11/compile_ok; else touch /tmp/c11/compile_bad; fi
  CUDA_VISIBLE_DEVICES=0 timeout 90 python3 -m pytest -q -s -m gpu -p no:cacheprovider tests/test_graph_safety.py \
      > /tmp/c11/gpu_tests.log 2>&1
  echo "gpu tests rc $? at $((SECONDS - T0)) s" | tee -a /tmp/c11/gpu_tests.log
  f=kb/level2/77_ConvTranspose3d_Scale_BatchNorm_GlobalAvgPool.py; c=/tmp/kbs/self_77.py
  { cat $f; printf '\n\nclass ModelNew(Model):\n    pass\n'; } > $c
  for i in 1 2; do CUDA_VISIBLE_DEVICES=0 timeout 90 python3 -m kernelrl.cli eval $f $c --device cuda --json \
      > /tmp/kbs/77_self_$i.json 2> /tmp/kbs/77_self_$i.err; echo "77 self $i rc $? at $((SECONDS - T0)) s"; done
  kblane 0 l3self 3 33_VanillaRNN,30_SwinTransformerV2 baseline:self
  kblane 0 l1comp1 1 "$(python3 .calls/todo.py 1 1/4 "$CLAB")" $CSRC
) > /tmp/c11/gpu0.log 2>&1 &
wait
cat /tmp/c11/compile_uid.log; tail -3 /tmp/c11/gpu_tests.log; tail -4 /tmp/c11/redteam_cuda.log; cat /tmp/c11/gpu*.log
for f in /tmp/c11/compile_tiny.json /tmp/kbs/*.json; do python3 -c "import json; r=json.load(open('$f')); t=r.get('timing') or {}; print('$f', r.get('speedup'), r.get('flags'), r.get('wall_s'), t.get('first_call_s'), t.get('graphs'), t.get('reference_variation'), (r.get('error') or '')[:1500])" 2>&1 | tail -3; done
for d in /tmp/kb/*/; do n=$(basename $d); grep -v "kernels scored" /tmp/kb/$n.log | grep "\[" | tail -4 | cut -c1-300; done
cp -r /tmp/kbs /tmp/c11/ 2>/dev/null; rm -f /tmp/c11/kbs/self_*.py
tar -C /tmp -czf "$OUT/c11.tgz" c11; tar -C /tmp -czf "$OUT/c11kb.tgz" --exclude='*/home' kb; ls -la "$OUT"; echo "call 11 ended at $((SECONDS - T0)) s"
