"""PNG plots of a report (matplotlib, Agg backend, no display needed).

- ``hist_log_speedup.png``: histogram of ln(speedup) of the successful kernels, one panel per level, every
  source overlaid (the paper's figure 3).
- ``speedup_profile.png``: each level's speedups sorted from best to worst, per source, on a log axis;
  unsuccessful tasks are crosses at the bottom (``FAIL_FLOOR``).

Figures are built by ``histogram_figure`` / ``profile_figure`` (testable: one axes per level) and saved at a
fixed size (no tight bounding box) so the PNG's pixel size is ``FIG_W * levels x FIG_H`` at ``DPI``.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # headless: reports are written on servers and GPU nodes
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from kernelrl.reports import stats  # noqa: E402

DPI = 100
PANEL_W, PANEL_H = 4.5, 3.6  # inches per level panel
FAIL_FLOOR = 0.05  # where unsuccessful tasks are drawn on the profile's log axis


def _levels(report) -> list[int]:
    return report.all_levels() or [0]


def histogram_figure(report) -> Figure:
    levels = _levels(report)
    fig, axes = plt.subplots(1, len(levels), figsize=(PANEL_W * len(levels), PANEL_H), dpi=DPI, squeeze=False)
    all_logs = [v for s in report.sources for r in s.rows if r["success"] and r["speedup"] > 0
                for v in stats.log_speedups([r["speedup"]])]
    edges = stats.log_bins(all_logs, width=_bin_width(all_logs))
    for ax, lvl in zip(axes[0], levels):
        counts_txt = []
        for i, s in enumerate(report.sources):
            rows = [r for r in s.rows if int(r["level"]) == lvl]
            logs = stats.log_speedups([r["speedup"] for r in rows], [r["success"] for r in rows])
            ok = len(logs)
            counts_txt.append(f"{s.label}: {ok}/{len(rows)} ok")
            if logs:
                ax.hist(logs, bins=edges, histtype="step" if len(report.sources) > 1 else "stepfilled",
                        linewidth=1.6, alpha=0.85, label=s.label, color=f"C{i}")
        ax.axvline(0.0, color="0.3", linestyle="--", linewidth=1)
        ax.set_title(f"Level {lvl}", fontsize=11)
        ax.set_xlabel("ln(speedup)")
        ax.set_ylabel("kernels")
        ax.text(0.02, 0.97, "\n".join(counts_txt), transform=ax.transAxes, va="top", ha="left", fontsize=7,
                color="0.25")
    if len(report.sources) > 1:
        axes[0][0].legend(fontsize=7, loc="center right")
    fig.suptitle(report.title, fontsize=10)
    fig.tight_layout()
    return fig


def _bin_width(logs: list[float]) -> float:
    if not logs:
        return 0.25
    span = max([0.0, *logs]) - min([0.0, *logs])
    for w in (0.05, 0.1, 0.25, 0.5, 1.0):
        if span / w <= 40:
            return w
    return 2.0


def profile_figure(report) -> Figure:
    levels = _levels(report)
    fig, axes = plt.subplots(1, len(levels), figsize=(PANEL_W * len(levels), PANEL_H), dpi=DPI, squeeze=False)
    for ax, lvl in zip(axes[0], levels):
        for i, s in enumerate(report.sources):
            rows = [r for r in s.rows if int(r["level"]) == lvl]
            if not rows:
                continue
            ys = sorted((r["speedup"] if r["success"] else 0.0 for r in rows), reverse=True)
            xs = [(k + 0.5) / len(ys) for k in range(len(ys))]
            ok = [(x, y) for x, y in zip(xs, ys) if y > 0]
            ax.plot([x for x, _ in ok], [y for _, y in ok], marker="o", markersize=3, linewidth=1.2,
                    label=s.label, color=f"C{i}")
            failed = [x for x, y in zip(xs, ys) if y <= 0]
            if failed:
                ax.plot(failed, [FAIL_FLOOR] * len(failed), linestyle="none", marker="x", markersize=5,
                        color=f"C{i}")
        ax.set_yscale("log")
        ax.axhline(1.0, color="0.3", linestyle="--", linewidth=1)
        ax.set_xlim(0, 1)
        ax.set_title(f"Level {lvl}", fontsize=11)
        ax.set_xlabel("fraction of tasks (sorted)")
        ax.set_ylabel("speedup")
    axes[0][0].legend(fontsize=7, loc="upper right")
    fig.suptitle(report.title, fontsize=10)
    fig.tight_layout()
    return fig


def save(fig: Figure, path: Path) -> Path:
    tmp = path.with_suffix(".tmp.png")
    fig.savefig(tmp, dpi=DPI, format="png")
    plt.close(fig)
    tmp.replace(path)
    return path


def write_plots(report, out_dir: Path) -> dict[str, Path]:
    return {
        "hist": save(histogram_figure(report), Path(out_dir) / "hist_log_speedup.png"),
        "profile": save(profile_figure(report), Path(out_dir) / "speedup_profile.png"),
    }
