"""The optimize controller: contrastive search with a frozen model (``kernelrl optimize``).

    from kernelrl.search import optimize_task
    res = optimize_task(task, llm="http://127.0.0.1:8000/v1#my-model", rounds=5, samples=4, sampler="bucket",
                        run_name="my-run", out="best.py")
"""

from kernelrl.search.loop import (
    STAGE,
    RoundStats,
    SearchConfig,
    SearchResult,
    attempt_key,
    optimize_task,
    write_best,
)

__all__ = ["STAGE", "RoundStats", "SearchConfig", "SearchResult", "attempt_key", "optimize_task", "write_best"]
