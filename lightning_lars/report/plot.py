"""``report.png`` beside ``results.json``: the run's curves as a picture, no W&B upload needed.

Six panels, from what the callbacks recorded during the run (resumed runs included, from their checkpoints):
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

from lightning_lars.callbacks import find_callback
from lightning_lars.callbacks.monitors.hparam_monitor import HParamMonitor
from lightning_lars.callbacks.monitors.run_history import RunHistory
from lightning_lars.callbacks.monitors.time_to_target import TimeToTarget
from lightning_lars.callbacks.monitors.trust_ratio import TrustRatioMonitor
from lightning_lars.callbacks.techniques.weight_decay_follows_lr import WeightDecayFollowsLR

REPORT_FILE = "report.png"
PLANNED_POINTS = 500  # samples of the pure schedule function


def _epoch_axis(ax) -> None:
    """At most 6 epoch ticks: a short run's fractional epochs (0.0365, 0.0370, ...) otherwise overlap."""
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(nbins=5))


def _empty(ax, why: str) -> None:
    ax.text(0.5, 0.5, why, ha="center", va="center", transform=ax.transAxes, color="0.4", wrap=True)
    ax.set_xticks([])
    ax.set_yticks([])


def target_line(cfg, trainer) -> tuple[float, str] | None:
    """(top-1 %, label): the time-to-target callback's target, else the recipe's numeric published top-1."""
    ttt = find_callback(trainer, TimeToTarget)
    if ttt is not None and ttt.target_top1 is not None:
        return float(ttt.target_top1), f"target {ttt.target_top1:g} %"
    published = (cfg.get("published") or {}).get("top1")
    if isinstance(published, (int, float)) and not isinstance(published, bool):
        return float(published), f"published {published:g} %"
    return None


def _planned_steps(monitor: HParamMonitor) -> list[int]:
    total = monitor.total_steps or (monitor.history[-1][0] + 1 if monitor.history else 0)
    return list(range(0, total, max(1, total // PLANNED_POINTS)))


def _lr_panel(ax, trainer, monitor) -> None:
    schedule = getattr(trainer.lightning_module, "lr_schedule", None)
    if monitor is None or not monitor.history:
        return _empty(ax, "no LR samples (HParamMonitor off)")
    steps = _planned_steps(monitor)
    if schedule is not None:
        ax.plot(steps, [schedule(s) for s in steps], color="C0", lw=1.5, label="planned (schedule)")
    ax.plot([h[0] for h in monitor.history], [h[2] for h in monitor.history], "o", ms=3, color="C3",
            label="applied (optimizer)")
    ax.set(title="learning rate, group 0", xlabel="optimizer step", ylabel="LR")
    ax.legend(fontsize=8)


def _wd_momentum_panel(ax, trainer, monitor) -> None:
    from matplotlib.ticker import FuncFormatter

    rows = [h for h in (monitor.history if monitor else []) if len(h) >= 5]
    if not rows:
        return _empty(ax, "no weight decay / momentum samples")
    module = trainer.lightning_module
    keywords = getattr(getattr(module, "optimizer_factory", None), "keywords", {}) or {}
    steps = _planned_steps(monitor)
    follows = find_callback(trainer, WeightDecayFollowsLR)
    base_wd = keywords.get("weight_decay")
    if base_wd is not None:
        planned = ([follows.weight_decay_at(s, module.lr_schedule, base_wd) for s in steps] if follows
                   else [base_wd] * len(steps))
        ax.plot(steps, planned, color="C0", lw=1.5, label="weight decay planned")
    applied_wd = [h[3] for h in rows]
    ax.plot([h[0] for h in rows], applied_wd, "o", ms=3, color="C3", label="weight decay applied")
    # weight decay in the lower half, momentum (0..1 scale) near the top: two constants must not overlap
    ax.set_ylim(0, 2 * max([*applied_wd, base_wd or 0.0]) or 1.0)
    ax.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:.3g}"))  # an offset label hits the title
    ax.set(title="weight decay and momentum, group 0", xlabel="optimizer step", ylabel="weight decay")
    momentum = [(h[0], h[4]) for h in rows if h[4] is not None]
    handles, labels = ax.get_legend_handles_labels()
    if momentum:
        twin = ax.twinx()
        if keywords.get("momentum") is not None:
            twin.plot(steps, [keywords["momentum"]] * len(steps), color="C2", lw=1.5, ls="--",
                      label="momentum planned")
        twin.plot(*zip(*momentum), "s", ms=3, color="C1", label="momentum applied")
        twin.set_ylabel("momentum")
        twin.set_ylim(0, 1.02)
        more_handles, more_labels = twin.get_legend_handles_labels()
        handles, labels = handles + more_handles, labels + more_labels
    ax.legend(handles, labels, fontsize=8, loc="lower right")


def _top1_panel(ax, cfg, trainer, history) -> None:
    points = [(r["epoch"], r["val_top1"]) for r in (history.epochs if history else []) if "val_top1" in r]
    if not points:
        return _empty(ax, "no evaluation during training yet")
    ax.plot(*zip(*points), "o-", color="C0", label="val top-1")
    target = target_line(cfg, trainer)
    if target is not None:
        ax.axhline(target[0], color="C3", ls="--", label=target[1])
    ax.set(title="val top-1 vs epoch", xlabel="epoch", ylabel="top-1 (%)")
    _epoch_axis(ax)
    ax.legend(fontsize=8)


def _loss_panel(ax, history) -> None:
    rows = history.epochs if history else []
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


def _trust_panel(fig, ax, trust) -> None:
    import numpy as np

    rows = trust.layer_history if trust is not None else []
    if not rows:
        return _empty(ax, "no trust ratios (not LARS/LAMB, or TrustRatioMonitor off)")
    ratios = np.array([r for _, r in rows], dtype=float).T  # layers x samples
    shown = np.log10(np.clip(ratios, 1e-12, None))
    image = ax.imshow(shown, aspect="auto", interpolation="nearest", cmap="viridis")
    steps = [s for s, _ in rows]
    ticks = sorted(set(np.linspace(0, len(steps) - 1, min(len(steps), 6)).round().astype(int)))
    ax.set_xticks(ticks, [str(steps[i]) for i in ticks])
    ax.set(title=f"trust ratio per layer ({ratios.shape[0]} adapted tensors)", xlabel="optimizer step",
           ylabel="layer (input -> output)")
    fig.colorbar(image, ax=ax, label="log10 trust ratio")


def _throughput_panel(ax, history) -> None:
    rows = [(r["epoch"], r["images_per_sec"]) for r in (history.epochs if history else []) if "images_per_sec" in r]
    if not rows:
        return _empty(ax, "no finished training epoch yet")
    ax.plot(*zip(*rows), "o-", color="C0")  # points at (fractional) epoch ends: a bar 0.6 wide misplaces them
    ax.set_ylim(bottom=0)
    ax.set(title="training throughput (all devices, evaluations excluded)", xlabel="epoch", ylabel="images/s")
    _epoch_axis(ax)


def write_report_png(cfg, trainer, out_dir: Path) -> Path | None:
    """Draw the six panels into ``out_dir/report.png`` (written atomically); None if matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")  # files only: no display on clusters
        import matplotlib.pyplot as plt
    except ImportError:
        print("report.png not written: matplotlib is not installed (pip install matplotlib)", flush=True)
        return None
    monitor, history = find_callback(trainer, HParamMonitor), find_callback(trainer, RunHistory)
    fig, axes = plt.subplots(2, 3, figsize=(16, 9), layout="constrained")
    _lr_panel(axes[0, 0], trainer, monitor)
    _wd_momentum_panel(axes[0, 1], trainer, monitor)
    _trust_panel(fig, axes[0, 2], find_callback(trainer, TrustRatioMonitor))
    _top1_panel(axes[1, 0], cfg, trainer, history)
    _loss_panel(axes[1, 1], history)
    _throughput_panel(axes[1, 2], history)
    fig.suptitle(f"{cfg.recipe_name}: seed {cfg.seed}, global batch {cfg.batch.global_size},"
                 f" {trainer.global_step} optimizer steps, {trainer.world_size} device(s)"
                 + _final_top1_text(trainer))
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


def _final_top1_text(trainer) -> str:
    value = trainer.callback_metrics.get("val/top1")
    value = float(value) if value is not None else math.nan
    return f"; final val top-1 {100 * value:.2f} %" if math.isfinite(value) else ""
