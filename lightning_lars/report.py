"""The table a run ends with: this run's numbers beside the recipe's published ones."""

from __future__ import annotations

from callbacks.throughput import ThroughputCallback


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.2f} %"


def results_table(cfg, metrics: dict[str, float], trainer) -> str:
    throughput = next((c for c in trainer.callbacks if isinstance(c, ThroughputCallback)), None)
    images_per_sec = throughput.images_per_sec(trainer.world_size) if throughput else float("nan")
    published = cfg.get("published") or {}
    logger = trainer.logger
    wandb_dir = getattr(getattr(logger, "experiment", None), "dir", None) if logger is not None else None
    rows = [
        ("top-1 (val)", _percent(metrics.get("val/top1")), f"{published.get('top1', '-')} %"),
        ("top-5 (val)", _percent(metrics.get("val/top5")), "-"),
        ("images/s (train, all devices)", f"{images_per_sec:,.0f}", "-"),
        ("wall time", f"{metrics['time/wall_s']:.1f} s", str(published.get("time", "-"))),
        ("epochs", str(trainer.current_epoch), str(published.get("epochs", "-"))),
        ("global batch", str(cfg.batch.global_size), str(published.get("global_batch", "-"))),
        ("hardware", f"{trainer.world_size} x {type(trainer.accelerator).__name__}", str(published.get("hardware", "-"))),
    ]
    width = max(len(r[0]) for r in rows)
    lines = [f"\nResults: recipe {cfg.recipe_name}", f"{'':{width}}  {'this run':>16}  published"]
    lines += [f"{name:{width}}  {ours:>16}  {theirs}" for name, ours, theirs in rows]
    lines.append(f"W&B run: {wandb_dir or 'none (logger disabled)'}")
    return "\n".join(lines)
