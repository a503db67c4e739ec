# Call 1 (nvidia-h200-x2, <= 420 s). Issue 34 item 5 on an H200 (no H100 is lent now):
#   GPU 0: the CUDA red team in full at this commit (the code after the refactor, the warm overlap and the memfd).
#   GPU 1: the MoE task (the one outlier of v13 vs v11), v13 and v11 code alternately (ABAB) on the same GPU and host,
#          so a difference between them is the code's, not the host's. v11 = 210291d, its kernelrl/ and bench/ copied
#          into .calls/v11 (not committed: git history has it).
CALL=c1 DEADLINE=${DEADLINE:-420}
source .calls/setup.sh
mkdir -p /tmp/c1
python3 -c 'import torch; print("cuda devices", torch.cuda.device_count(), torch.cuda.get_device_name(0))'
( CUDA_VISIBLE_DEVICES=0 KERNELRL_REDTEAM_CLOCK=held timeout 340 python3 -m pytest -q -s -m gpu -p no:cacheprovider \
      tests/redteam/test_redteam_cuda.py > /tmp/c1/redteam_cuda.log 2>&1
  echo "redteam rc $? at $((SECONDS - T0)) s" | tee -a /tmp/c1/redteam_cuda.log ) &
( for r in 1 2; do
    for v in cur v11; do
      if [ $v = cur ]; then d=$ROOT; else d=$ROOT/.calls/v11; fi
      ( cd "$d" && PYTHONPATH="$d" KERNELRL_HOME=/tmp/krl-$v timeout 95 python3 bench/evaluator_bench.py --device cuda:1 \
          --out-dir /tmp/c1/moe-$v-$r --no-prebuild --only 31 --repeats 5 --long-factor 10 --clock held \
          --max-wall-s 60 --max-minutes 1.2 > /tmp/c1/moe-$v-$r.log 2>&1 )
      echo "moe $v round $r rc $? at $((SECONDS - T0)) s: $(grep -h -o '"speedup": [0-9.]*' /tmp/c1/moe-$v-$r/rows.jsonl 2>/dev/null | tr '\n' ' ')"
    done
  done ) 2>&1 | tee /tmp/c1/moe.log &
wait
tail -5 /tmp/c1/redteam_cuda.log
for f in /tmp/c1/moe-*/table.md; do echo "== $f"; grep -i moe "$f"; done
tar -C /tmp -czf "$OUT/c1.tgz" c1; ls -la "$OUT"; echo "call 1 ended at $((SECONDS - T0)) s"
