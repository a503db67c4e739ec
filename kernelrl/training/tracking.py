"""Where training metrics go: every logged step to a JSONL file and the configured trackers, a short line to
the console every ``log_every`` steps.

    from kernelrl.training.tracking import attach_tracking, report_to

    args = GRPOConfig(..., report_to=report_to(), disable_tqdm=True)
    trainer = GRPOTrainer(..., args=args)
    attach_tracking(trainer, out_dir, label="crl", total_steps=20, progress=progress, span=(0.0, 0.95))

transformers prints every log dict (30+ keys per GRPO step) through ``PrinterCallback`` when tqdm is off; a
pipeline run then shows hundreds of such lines. Here that printer is replaced: the full dict goes to
``<out_dir>/trainer-log.jsonl`` and to the trackers (TensorBoard event files in ``<out_dir>/tb`` by default;
``KERNELRL_REPORT_TO=tensorboard,wandb,mlflow`` or ``none``), and the console gets ``KERNELRL_PROGRESS`` lines
with the few numbers that matter (step, loss or reward, success rate, seconds), which the flow shows per stage.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kernelrl.training import dist

log = logging.getLogger("kernelrl.training")

# The numbers a console line shows, in this order, when a log dict has them (label, keys tried, format).
HEADLINE = (
    ("loss", ("loss", "train_loss"), "{:.4g}"),
    ("reward", ("reward",), "{:.3g}"),
    ("reward_std", ("reward_std",), "{:.3g}"),
    ("success", ("success_rate",), "{:.0%}"),
    ("speedup", ("mean_speedup",), "{:.3g}"),
    ("lr", ("learning_rate",), "{:.2g}"),
    ("gen_s", ("generation_s",), "{:.1f}"),
    ("eval_s", ("evaluation_s",), "{:.1f}"),
)


def _settings():
    from kernelrl.config.settings import load_settings

    return load_settings()


def report_to(settings=None) -> list[str]:
    """Trackers transformers itself should drive (TrainingArguments.report_to). TensorBoard is attached by
    ``attach_tracking`` with an explicit directory instead (transformers would pick ``output_dir/runs/<date>``)."""
    settings = settings or _settings()
    return [t for t in settings.report_to if t != "tensorboard"]


def headline(logs: dict[str, Any]) -> str:
    """``loss=0.93 lr=2e-05``: the HEADLINE numbers present in ``logs``."""
    parts = []
    for label, keys, fmt in HEADLINE:
        for k in keys:
            v = logs.get(k)
            if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
                parts.append(f"{label}={fmt.format(v)}")
                break
    return " ".join(parts)


def _tensorboard_callback(tb_dir: Path):
    try:
        from torch.utils.tensorboard import SummaryWriter
        from transformers.integrations import TensorBoardCallback
    except ImportError as e:  # tensorboard not installed: metrics still go to the JSONL file
        log.warning("tensorboard is not installed (%s): training metrics go to trainer-log.jsonl only; "
                    "pip install tensorboard, or set KERNELRL_REPORT_TO=none", e)
        return None
    tb_dir.mkdir(parents=True, exist_ok=True)
    return TensorBoardCallback(tb_writer=SummaryWriter(log_dir=str(tb_dir)))


def make_console_callback(out_dir: Path, label: str, total_steps: int | None,
                          progress: Callable[[float, str], None] | None, span: tuple[float, float] = (0.0, 1.0),
                          every: int = 10, extra: Callable[[int], dict[str, Any]] | None = None):
    """A TrainerCallback that appends each log dict to ``out_dir/trainer-log.jsonl`` and reports a progress
    line (through ``progress``, mapped into ``span`` of the stage) on the first step, every ``every`` steps
    and the last. ``extra(step)``: more numbers for that step (crl's success rate and timings)."""
    from transformers import TrainerCallback

    jsonl = Path(out_dir) / "trainer-log.jsonl"

    class ConsoleMetrics(TrainerCallback):
        def __init__(self):
            self.t0 = time.monotonic()
            self.last_printed = -1

        def on_log(self, args, state, control, logs=None, **kw):
            if not dist.is_main() or not logs:
                return
            step = int(state.global_step)
            row = {"step": step, "time_s": round(time.monotonic() - self.t0, 3), **logs,
                   **((extra(step) if extra else None) or {})}
            with open(jsonl, "a") as f:
                f.write(json.dumps(row, default=str) + "\n")
            total = int(state.max_steps or total_steps or 0)
            last = bool(total) and step >= total
            if step == self.last_printed or not (step <= 1 or step % every == 0 or last or "train_runtime" in logs):
                return
            self.last_printed = step
            frac = span[0] + (span[1] - span[0]) * (step / total if total else 0.0)
            msg = f"{label} step {step}/{total or '?'}"
            numbers = headline(row)
            if progress is not None:
                progress(frac, f"{msg} {numbers}".strip())

    return ConsoleMetrics()


def attach_tracking(trainer, out_dir: Path, *, label: str, total_steps: int | None = None,
                    progress: Callable[[float, str], None] | None = None, span: tuple[float, float] = (0.0, 1.0),
                    extra: Callable[[int], dict[str, Any]] | None = None, settings=None) -> dict[str, Any]:
    """Swap transformers' per-step dict printer for the JSONL file + console lines, and add TensorBoard when it
    is a configured tracker. Returns where things go (for the stage's manifest)."""
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    settings = settings or _settings()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    trainer.remove_callback(PrinterCallback)
    trainer.remove_callback(ProgressCallback)
    trainer.add_callback(make_console_callback(out_dir, label, total_steps, progress, span,
                                               every=settings.log_every, extra=extra))
    where: dict[str, Any] = {"metrics_log": str(out_dir / "trainer-log.jsonl"), "trackers": list(settings.report_to)}
    if "tensorboard" in settings.report_to and dist.is_main():
        cb = _tensorboard_callback(out_dir / "tb")
        if cb is not None:
            trainer.add_callback(cb)
            where["tensorboard_dir"] = str(out_dir / "tb")
    return where
