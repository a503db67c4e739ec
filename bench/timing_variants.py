"""A/B of the evaluator's timing knobs on a GPU: the same honest candidates evaluated a few times under each
variant of EvalConfig, in one device call, so that knob choices rest on numbers from the same machine.

    python bench/timing_variants.py --out-dir $OUT/variants --tasks 02_Softmax,03_LayerNorm \
        --variants 'base={};no_early_stop={"target_ci": 0};host={"clock": "host"}' --repeats 3

Prints one JSON line per evaluation and, per task and variant, the repeats' spread of the reported score
(max/min - 1). Raw rounds go to DIR/rows.jsonl (analyse offline with bench/analyze_rounds.py-style code).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from evaluator_bench import candidates, one  # noqa: E402

from kernelrl.config.stages import EvalConfig  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--out-dir", type=Path, required=True)
    ap.add_argument("--tasks", required=True, help="Comma list of task names or keys (substring match).")
    ap.add_argument("--variants", required=True, help="'name={json};name={json}' EvalConfig overrides.")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--max-minutes", type=float, default=5.0)
    a = ap.parse_args()
    a.out_dir.mkdir(parents=True, exist_ok=True)
    variants = []
    for part in a.variants.split(";"):
        name, _, js = part.partition("=")
        variants.append((name.strip(), json.loads(js or "{}")))
    cands = candidates(a.device)
    want = [w.strip() for w in a.tasks.split(",") if w.strip()]
    chosen = [(t, s) for w in want for t, s in cands if w in t.key][: len(want)]
    base = EvalConfig(device=a.device, reverify=False)
    t_stop = time.monotonic() + a.max_minutes * 60
    summary = []
    for task, seed in chosen:
        for name, kw in variants:
            cfg = dataclasses.replace(base, **kw)
            reps = []
            for r in range(a.repeats):
                if time.monotonic() > t_stop:
                    break
                row = one(task, seed.source, cfg)
                reps.append(row)
                with open(a.out_dir / "rows.jsonl", "a") as f:
                    f.write(json.dumps({"task": task.key, "seed": seed.name, "variant": name, **row}) + "\n")
                print(json.dumps({"task": task.key, "variant": name, "score": row["score_raw"],
                                  "est": row["estimate"], "ci": row["ci"], "k": row["k"], "n": row["rounds"],
                                  "stop": row["stop"], "wall": row["wall_s"], "phases": row["phases_s"],
                                  "flags": row["flags"], "err": row["error"]}), flush=True)
            ok = [x["score_raw"] for x in reps if x["success"] and x["score_raw"]]
            est = [x["estimate"] for x in reps if x["success"] and x["estimate"]]
            summary.append({"task": task.key, "variant": name, "n": len(reps),
                            "score_dev": round(max(ok) / min(ok) - 1, 4) if len(ok) > 1 else None,
                            "est_dev": round(max(est) / min(est) - 1, 4) if len(est) > 1 else None,
                            "score_median": round(statistics.median(ok), 4) if ok else None,
                            "wall_median": round(statistics.median(x["wall_s"] for x in reps), 2) if reps else None})
    (a.out_dir / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    for s in summary:
        print(json.dumps(s))


if __name__ == "__main__":
    main()
