"""The "Runs of ours" plot: top-1 per epoch per arm (mean over seeds, band = the 95 % t interval of that mean,
the same rule for every arm, so an arm with more seeds draws a narrower band, not a wider one as min..max
would), one panel per group."""

from __future__ import annotations

import math
import statistics
from pathlib import Path

from lightning_lars.report.seed_stats import t_quantile

BAND = "band: 95 % interval of the mean over seeds"
LINE_STYLES = ("-", "--", "-.", ":")


def mean_band(column: list[float]) -> tuple[float, float, float]:
    """(mean, low, high) of one epoch's top-1 over seeds: mean +- t(0.975, n - 1) x s / sqrt(n); NaN where a
    seed diverged, no band (low = high = mean) for one seed."""
    if not all(map(math.isfinite, column)):
        return math.nan, math.nan, math.nan
    mean = statistics.fmean(column)
    if len(column) < 2:
        return mean, mean, mean
    half = t_quantile(0.975, len(column) - 1) * statistics.stdev(column) / math.sqrt(len(column))
    return mean, mean - half, mean + half


def plot_groups(groups: dict[tuple, dict[str, list[dict]]], path: Path) -> Path | None:
    """``groups``: a set-up's title -> arm -> runs (runs.jsonl lines); None when there is none."""
    if not groups:
        return None
    try:
        import matplotlib  # optional: without it the table is still written

        matplotlib.use("Agg")  # files only: no display
        import matplotlib.pyplot as plt  # after the backend is chosen
    except ImportError:
        print(f"{path} not written: matplotlib is not installed (pip install matplotlib)", flush=True)
        return None

    names = list(dict.fromkeys(arm for arms in groups.values() for arm in arms))  # one colour per arm
    lines = {}
    per_row = min(len(groups), 4)  # panels per row: a wide study wraps
    rows = math.ceil(len(groups) / per_row)
    fig, axes = plt.subplots(rows, per_row, figsize=(4.2 * per_row, 3.2 * rows), squeeze=False)
    for ax in axes.flat[len(groups) :]:
        ax.set_visible(False)
    for ax, (title, arms) in zip(axes.flat, groups.items(), strict=False):
        for arm, runs in arms.items():
            curves = [[math.nan if v is None else v for v in r["top1_per_epoch"]] for r in runs]
            x = range(1, len(curves[0]) + 1)
            cols = list(zip(*curves, strict=False))
            mean, low, high = zip(*map(mean_band, cols), strict=True)
            index = names.index(arm)
            color = f"C{index % 10}"  # and a dash pattern: arms of near colours (red, brown) stay apart
            (lines[arm],) = ax.plot(x, mean, label=arm, lw=1.2, color=color, ls=LINE_STYLES[index % 4])
            ax.fill_between(x, low, high, alpha=0.15, color=color)
        large = sorted({runs[0]["batch"] for arm, runs in arms.items()}, reverse=True)
        ax.set_title(f"{title} (B={large[0]})", fontsize=7)
        ax.set(xlabel="epoch", ylabel="val top-1 %")
        ax.grid(alpha=0.3)
    # outside the last panel: the curves fill each panel
    axes.flat[len(groups) - 1].legend(
        handles=list(lines.values()), fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1), title=BAND,
        title_fontsize=7,
    )  # fmt: skip
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=80, bbox_inches="tight")
    plt.close(fig)
    return Path(path)
