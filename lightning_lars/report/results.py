"""The end of a run: this run's numbers beside the recipe's published ones, on the terminal, in
``results.json`` (what ``make check`` reads) and in W&B (summary table + LR, top-1 and trust-ratio plots).

Everything here runs on global rank 0 only (train.py calls `finish` there), and works with W&B offline.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from lightning.pytorch.loggers import WandbLogger

from lightning_lars.report import plot as report_plot
from lightning_lars.callbacks import find_callback
from lightning_lars.callbacks.techniques.evaluation import planned_epochs
from lightning_lars.callbacks.monitors.hparam_monitor import HParamMonitor
from lightning_lars.callbacks.monitors.throughput import ThroughputCallback
from lightning_lars.callbacks.monitors.time_to_target import TimeToTarget
from lightning_lars.callbacks.monitors.trust_ratio import TrustRatioMonitor

RESULTS_FILE = "results.json"
PLANNED_LR_POINTS = 500  # samples of the pure schedule function for the LR plot


def wandb_logger_of(trainer) -> WandbLogger | None:
    return next((lg for lg in trainer.loggers if isinstance(lg, WandbLogger)), None)


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.2f} %"


def _published(cfg) -> dict:
    return dict(cfg.get("published") or {})


def deviations(cfg) -> list[dict]:
    """The recipe's ``deviations:`` (technique, published, ours, why), as composed and checked."""
    return [dict(entry) for entry in cfg.get("deviations") or []]


def hardware_of(trainer) -> str:
    """``8 x NVIDIA H100 80GB HBM3`` or ``1 x CPU (2 cores)``: what the runs table names."""
    import os

    import torch

    if trainer.strategy.root_device.type == "cuda":
        return f"{trainer.world_size} x {torch.cuda.get_device_name(trainer.strategy.root_device)}"
    return f"{trainer.world_size} x CPU ({os.cpu_count()} cores)"


def epochs_done(trainer) -> float:
    """Epochs trained in the source's count (the plan's), else Lightning's passes over the loader."""
    epochs = planned_epochs(trainer, trainer.global_step)
    return float(trainer.current_epoch) if epochs is None else epochs


def summary_rows(cfg, metrics: dict[str, float], trainer) -> list[tuple[str, str, str]]:
    """(quantity, this run, published) rows: top-1, time, epochs, global batch, hardware, throughput, target."""
    throughput = find_callback(trainer, ThroughputCallback)
    images_per_sec = throughput.images_per_sec(trainer.world_size) if throughput else float("nan")
    published = _published(cfg)
    rows = [
        ("top-1 (val)", _percent(metrics.get("val/top1")), _published_percent(published.get("top1"))),
        ("top-5 (val)", _percent(metrics.get("val/top5")), "-"),
        ("wall time", f"{metrics['time/wall_s']:.1f} s", str(published.get("time", "-"))),
        ("epochs", f"{epochs_done(trainer):.4g}", str(published.get("epochs", "-"))),
        ("optimizer steps", str(trainer.global_step), "-"),
        ("global batch", str(cfg.batch.global_size), str(published.get("global_batch", "-"))),
        ("hardware", f"{trainer.world_size} x {type(trainer.accelerator).__name__}",
         str(published.get("hardware", "-"))),
        ("images/s (train, all devices)", f"{images_per_sec:,.0f}", "-"),
    ]
    if throughput is not None:
        rows.append(("data wait (share of train time)", f"{100 * throughput.data_wait_fraction():.1f} %", "-"))
    target = find_callback(trainer, TimeToTarget)
    if target is not None and target.target_top1 is not None:
        reached = (f"{target.time_to_target_s:.1f} s, {target.epochs_to_target:.2f} epochs" if target.reached
                   else "not reached")
        rows.append((f"time to {target.target_top1:g} % top-1", reached, str(published.get("time", "-"))))
    return rows


def _published_percent(value) -> str:
    return f"{value} %" if isinstance(value, (int, float)) else str(value or "-")


def results_table(cfg, metrics: dict[str, float], trainer) -> str:
    rows = summary_rows(cfg, metrics, trainer)
    logger = wandb_logger_of(trainer)
    # experiment.dir is the run's files/ folder; its parent is what `wandb sync` takes
    wandb_dir = str(Path(logger.experiment.dir).parent) if logger is not None else None
    width = max(len(r[0]) for r in rows)
    ours_width = max(16, *(len(r[1]) for r in rows))
    lines = [f"\nResults: recipe {cfg.recipe_name}", f"{'':{width}}  {'this run':>{ours_width}}  published"]
    lines += [f"{name:{width}}  {ours:>{ours_width}}  {theirs}" for name, ours, theirs in rows]
    listed = deviations(cfg)
    lines.append(f"Deviations from the source ({len(listed)}):" if listed else "Deviations from the source: none listed")
    lines += [f"  {d['technique']}: published {d['published']}; ours {d['ours']} ({d['why']})" for d in listed]
    lines.append(f"W&B run: {wandb_dir or 'none (no W&B logger)'}")
    if wandb_dir and "offline-run" in wandb_dir:
        lines.append(f"  offline; upload it with: wandb sync {wandb_dir}")
    return "\n".join(lines)


def results(cfg, metrics: dict[str, float], trainer) -> dict:
    """The machine-readable record of a run (``results.json``): final metrics, time-to-target, published."""
    out = {"recipe": cfg.recipe_name, "seed": int(cfg.seed), "global_batch": int(cfg.batch.global_size),
           "epochs": epochs_done(trainer), "steps": trainer.global_step, "world_size": trainer.world_size,
           "metrics": {k: v for k, v in metrics.items() if math.isfinite(v)}, "published": _published(cfg),
           "deviations": deviations(cfg), "hardware": hardware_of(trainer)}
    throughput = find_callback(trainer, ThroughputCallback)
    if throughput is not None:
        out["metrics"].update({k: v for k, v in throughput.summary(trainer.world_size).items() if math.isfinite(v)})
    target = find_callback(trainer, TimeToTarget)
    if target is not None:
        out["metrics"].update(target.summary())
        out["evals"] = [dict(zip(("epoch", "step", "top1", "elapsed_s"), e)) for e in target.evals]
    return out


def lr_series(trainer) -> list[tuple[int, float, str]]:
    """(step, lr, kind): the planned schedule (the pure function over the whole run) and the applied values.

    Needs the `HParamMonitor`: it recorded the applied values and the run's planned number of steps.
    """
    monitor = find_callback(trainer, HParamMonitor)
    if monitor is None:
        return []
    rows = []
    schedule = getattr(trainer.lightning_module, "lr_schedule", None)
    if schedule is not None and monitor.total_steps:
        stride = max(1, monitor.total_steps // PLANNED_LR_POINTS)
        rows += [(step, float(schedule(step)), "planned") for step in range(0, monitor.total_steps, stride)]
    rows += [(step, lr, "applied") for step, _, lr, *_ in monitor.history]
    return rows


def log_to_wandb(cfg, metrics: dict[str, float], trainer) -> bool:
    """Summary table + plots into the run's W&B run; False when there is no W&B logger."""
    logger = wandb_logger_of(trainer)
    if logger is None:
        return False
    import wandb  # only when W&B is in use

    run = logger.experiment
    rows = summary_rows(cfg, metrics, trainer)
    report = {"report/summary": wandb.Table(columns=["quantity", "this run", "published"], data=rows),
              "report/deviations": wandb.Table(columns=["technique", "published", "ours", "why"],
                                               data=[[d[k] for k in ("technique", "published", "ours", "why")]
                                                     for d in deviations(cfg)])}
    lr = lr_series(trainer)
    if lr:
        table = wandb.Table(columns=["step", "lr", "kind"], data=lr)
        report["report/lr_schedule"] = wandb.plot.line(table, "step", "lr", stroke="kind", title="LR schedule")
    target = find_callback(trainer, TimeToTarget)
    if target is not None and target.evals:
        table = wandb.Table(columns=["epoch", "step", "top1", "elapsed_s"], data=[list(e) for e in target.evals])
        report["report/top1_vs_epoch"] = wandb.plot.line(table, "epoch", "top1", title="val top-1 (%) vs epoch")
    trust = find_callback(trainer, TrustRatioMonitor)
    if trust is not None and trust.history:
        data = [[step, q, v] for step, summary in trust.history for q, v in summary.items()]
        table = wandb.Table(columns=["step", "quantile", "trust_ratio"], data=data)
        report["report/trust_ratio_quantiles"] = wandb.plot.line(
            table, "step", "trust_ratio", stroke="quantile", title="trust ratio over layers (quantiles)")
    if trust is not None and trust.last is not None:
        last = trust.last
        table = wandb.Table(columns=["layer", "w_norm", "g_norm", "trust_ratio"],
                            data=[list(r) for r in zip(last["names"], last["w_norm"], last["g_norm"],
                                                       last["trust_ratio"])])
        report["report/trust_ratio_per_layer"] = wandb.plot.bar(
            table, "layer", "trust_ratio", title=f"trust ratio per layer at step {last['step']}")
    run.log(report)
    run.summary.update({k: v for k, v in results(cfg, metrics, trainer)["metrics"].items()})
    return True


def finish(cfg, metrics: dict[str, float], trainer) -> dict:
    """Rank 0, after fit: print the table, write ``<output_dir>/results.json``, fill the W&B report."""
    record = results(cfg, metrics, trainer)
    out_dir = Path(cfg.paths.output_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / RESULTS_FILE).write_text(json.dumps(record, indent=2, default=str) + "\n")
    log_to_wandb(cfg, metrics, trainer)
    png = report_plot.write_report_png(cfg, trainer, out_dir)  # the curves, viewable without W&B
    print(results_table(cfg, metrics, trainer), flush=True)
    print(f"Report: {png if png else 'no report.png'}; numbers: {out_dir / RESULTS_FILE}", flush=True)
    return record
