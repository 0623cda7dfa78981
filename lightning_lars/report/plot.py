"""``report.png`` beside ``results.json``: the run's curves as a picture, no W&B upload needed.

Six panels, from the run's `RunRecord`: what the callbacks recorded during the run (resumed runs included,
from their checkpoints):
the LR schedule planned (the pure schedule function) against the LR the optimizer applied; weight decay and
momentum planned against applied; val top-1 against epochs with the target; train and val loss against
epochs; the trust ratio of every adapted layer over training (a heat map: one row per layer, one column per
sample, so zero-initialised blocks that read 1.0 at step 0 are seen to move); training images/s per epoch.
A panel without data says why (e.g. a 3-step toy run has no evaluation).

matplotlib is a dependency; if it is missing the run still ends normally, with a one-line notice.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

from lightning_lars.report.record import HParamSamples, RunRecord, TrustRecord

REPORT_FILE = "report.png"
PLANNED_POINTS = 500  # samples of the pure schedule function


def _epoch_axis(ax) -> None:
    """At most 6 epoch ticks: a short run's fractional epochs (0.0365, 0.0370, ...) otherwise overlap."""
    from matplotlib.ticker import MaxNLocator  # matplotlib only once a report is drawn (it is optional)

    ax.xaxis.set_major_locator(MaxNLocator(nbins=5))


def _empty(ax, why: str) -> None:
    ax.text(0.5, 0.5, why, ha="center", va="center", transform=ax.transAxes, color="0.4", wrap=True)
    ax.set_xticks([])
    ax.set_yticks([])


def target_line(cfg, record: RunRecord) -> tuple[float, str] | None:
    """(top-1 %, label): the time-to-target judge's target, else the recipe's numeric published top-1."""
    ttt = record.target
    if ttt is not None and ttt.target_top1 is not None:
        return float(ttt.target_top1), f"target {ttt.target_top1:g} %"
    published = (cfg.get("published") or {}).get("top1")
    if isinstance(published, (int, float)) and not isinstance(published, bool):
        return float(published), f"published {published:g} %"
    return None


def _planned_steps(samples: HParamSamples) -> list[int]:
    total = samples.total_steps or (samples.applied[-1][0] + 1 if samples.applied else 0)
    return list(range(0, total, max(1, total // PLANNED_POINTS)))


def _lr_panel(ax, samples: HParamSamples | None) -> None:
    if samples is None or not samples.applied:
        return _empty(ax, "no LR samples (HParamMonitor off)")
    schedule = samples.lr_schedule
    steps = _planned_steps(samples)
    if schedule is not None:
        ax.plot(steps, [schedule(s) for s in steps], color="C0", lw=1.5, label="planned (schedule)")
    ax.plot(
        [h[0] for h in samples.applied],
        [h[2] for h in samples.applied],
        "o",
        ms=3,
        color="C3",
        label="applied (optimizer)",
    )
    ax.set(title="learning rate, group 0", xlabel="optimizer step", ylabel="LR")
    ax.legend(fontsize=8)


def _wd_momentum_panel(ax, samples: HParamSamples | None) -> None:
    from matplotlib.ticker import FuncFormatter  # matplotlib only once a report is drawn (it is optional)

    rows = [h for h in (samples.applied if samples else ()) if len(h) >= 5]
    if not rows:
        return _empty(ax, "no weight decay / momentum samples")
    steps = _planned_steps(samples)
    base_wd = samples.base_weight_decay
    if base_wd is not None:
        planned = [samples.planned_weight_decay(s) for s in steps]
        ax.plot(steps, planned, color="C0", lw=1.5, label="weight decay planned")
    applied_wd = [h[3] for h in rows]
    ax.plot([h[0] for h in rows], applied_wd, "o", ms=3, color="C3", label="weight decay applied")
    # weight decay in the lower half, momentum (0..1 scale) near the top: two constants must not overlap
    ax.set_ylim(0, 2 * max([*applied_wd, base_wd or 0.0]) or 1.0)
    # an offset label hits the title
    ax.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:.3g}"))
    ax.set(title="weight decay and momentum, group 0", xlabel="optimizer step", ylabel="weight decay")
    momentum = [(h[0], h[4]) for h in rows if h[4] is not None]
    handles, labels = ax.get_legend_handles_labels()
    if momentum:
        twin = ax.twinx()
        if samples.base_momentum is not None:
            twin.plot(
                steps,
                [samples.base_momentum] * len(steps),
                color="C2",
                lw=1.5,
                ls="--",
                label="momentum planned",
            )
        twin.plot(*zip(*momentum), "s", ms=3, color="C1", label="momentum applied")
        twin.set_ylabel("momentum")
        twin.set_ylim(0, 1.02)
        more_handles, more_labels = twin.get_legend_handles_labels()
        handles, labels = handles + more_handles, labels + more_labels
    ax.legend(handles, labels, fontsize=8, loc="lower right")


def _top1_panel(ax, cfg, record: RunRecord) -> None:
    points = [(r["epoch"], r["val_top1"]) for r in record.epoch_rows if "val_top1" in r]
    if not points:
        return _empty(ax, "no evaluation during training yet")
    ax.plot(*zip(*points), "o-", color="C0", label="val top-1")
    target = target_line(cfg, record)
    if target is not None:
        ax.axhline(target[0], color="C3", ls="--", label=target[1])
    ax.set(title="val top-1 vs epoch", xlabel="epoch", ylabel="top-1 (%)")
    _epoch_axis(ax)
    ax.legend(fontsize=8)


def _loss_panel(ax, rows: tuple[dict[str, float], ...]) -> None:
    train = [(r["epoch"], r["train_loss"]) for r in rows if "train_loss" in r]
    val = [(r["epoch"], r["val_loss"]) for r in rows if "val_loss" in r]
    if not train and not val:
        return _empty(ax, "no finished epoch yet")
    if train:
        ax.plot(*zip(*train), "o-", color="C0", label="train (epoch mean)")
    if val:
        ax.plot(*zip(*val), "s-", color="C1", label="val")
    ax.set(title="loss vs epoch", xlabel="epoch", ylabel="cross-entropy")
    _epoch_axis(ax)
    ax.legend(fontsize=8)


def _trust_panel(fig, ax, trust: TrustRecord | None) -> None:
    import numpy as np  # with matplotlib, only once a report is drawn

    rows = trust.per_layer if trust is not None else ()
    if not rows:
        return _empty(ax, "no trust ratios (not LARS/LAMB, or TrustRatioMonitor off)")
    ratios = np.array([r for _, r in rows], dtype=float).T  # layers x samples
    shown = np.log10(np.clip(ratios, 1e-12, None))
    image = ax.imshow(shown, aspect="auto", interpolation="nearest", cmap="viridis")
    steps = [s for s, _ in rows]
    ticks = sorted(set(np.linspace(0, len(steps) - 1, min(len(steps), 6)).round().astype(int)))
    ax.set_xticks(ticks, [str(steps[i]) for i in ticks])
    ax.set(
        title=f"trust ratio per layer ({ratios.shape[0]} adapted tensors)",
        xlabel="optimizer step",
        ylabel="layer (input -> output)",
    )
    fig.colorbar(image, ax=ax, label="log10 trust ratio")


def _throughput_panel(ax, epoch_rows: tuple[dict[str, float], ...]) -> None:
    rows = [(r["epoch"], r["images_per_sec"]) for r in epoch_rows if "images_per_sec" in r]
    if not rows:
        return _empty(ax, "no finished training epoch yet")
    ax.plot(*zip(*rows), "o-", color="C0")  # points at (fractional) epoch ends: a bar 0.6 wide misplaces them
    ax.set_ylim(bottom=0)
    ax.set(title="training throughput (all devices, evaluations excluded)", xlabel="epoch", ylabel="images/s")
    _epoch_axis(ax)


def write_report_png(cfg, record: RunRecord, out_dir: Path) -> Path | None:
    """Draw the six panels into ``out_dir/report.png`` (written atomically); None if matplotlib is missing."""
    try:
        import matplotlib  # optional: without it the run ends with a one-line notice

        matplotlib.use("Agg")  # files only: no display on clusters
        import matplotlib.pyplot as plt  # after the backend is chosen
    except ImportError:
        print("report.png not written: matplotlib is not installed (pip install matplotlib)", flush=True)
        return None
    fig, axes = plt.subplots(2, 3, figsize=(16, 9), layout="constrained")
    _lr_panel(axes[0, 0], record.hparams)
    _wd_momentum_panel(axes[0, 1], record.hparams)
    _trust_panel(fig, axes[0, 2], record.trust)
    _top1_panel(axes[1, 0], cfg, record)
    _loss_panel(axes[1, 1], record.epoch_rows)
    _throughput_panel(axes[1, 2], record.epoch_rows)
    fig.suptitle(
        f"{cfg.recipe_name}: seed {cfg.seed}, global batch {cfg.batch.global_size},"
        f" {record.steps} optimizer steps, {record.world_size} device(s)" + _final_top1_text(record)
    )
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / REPORT_FILE
    temp = out_dir / f".{REPORT_FILE}.tmp-{os.getpid()}.png"
    try:
        fig.savefig(temp, dpi=90)
        os.replace(temp, path)
    finally:
        plt.close(fig)
        temp.unlink(missing_ok=True)
    return path


def _final_top1_text(record: RunRecord) -> str:
    value = record.final_top1
    return f"; final val top-1 {100 * value:.2f} %" if value is not None and math.isfinite(value) else ""
