"""TEST-ONLY evaluate functions for the queue and worker tests (workers get them as ``--evaluate-fn
tests._fake_eval:fake_evaluate``). They time nothing: they sleep, log the call, and return a result dict.

Knobs (environment of the worker process, or the candidate source):
- FAKE_EVAL_SLEEP: seconds per evaluation (default 0.01); "# fake-sleep: X" in the candidate source wins (a fleet's
  workers get an allow-listed environment without FAKE_EVAL_*: flows/fleet.py)
- FAKE_EVAL_LOG: append "<pid> <source hash>" per call (to count re-timings)
- FAKE_EVAL_FACTOR: multiply the speedup (another "GPU" measuring differently)
- "# fake-speedup: X" in the candidate source: the speedup (default 1.5); "# fake-fail" fails the candidate
"""

import hashlib
import os
import re
import time


class _Res(dict):
    def to_dict(self):
        return dict(self)


def fake_evaluate(task_source, cand_source, cfg):
    log = os.environ.get("FAKE_EVAL_LOG")
    if log:
        with open(log, "a") as f:
            f.write(f"{os.getpid()} {hashlib.sha256(cand_source.encode()).hexdigest()[:12]}\n")
    m = re.search(r"# fake-sleep: ([0-9.]+)", cand_source)  # for workers whose environment is allow-listed
    time.sleep(float(m.group(1)) if m else float(os.environ.get("FAKE_EVAL_SLEEP", "0.01")))
    m = re.search(r"# fake-speedup: ([0-9.]+)", cand_source)
    speedup = float(m.group(1)) if m else 1.5
    speedup = round(speedup * float(os.environ.get("FAKE_EVAL_FACTOR", "1")), 2)
    ok = "# fake-fail" not in cand_source
    return _Res(executable=True, correct=ok, speedup=speedup if ok else 0.0, flags=[] if ok else ["wrong-output"],
                error=None, timing={"pid": os.getpid()}, evaluator_version="fake-1", device_type=cfg.device,
                success=ok, reverify_setting=cfg.reverify)
