"""The end of a run: this run's numbers beside the recipe's published ones, on the terminal, in
``results.json`` (what ``make check`` reads) and in W&B (summary table + LR, top-1 and trust-ratio plots).

Everything here runs on global rank 0 only (`lightning_lars.training.run` calls `finish` there), reads the run
from a `RunRecord` (plain data, filled from the callbacks after fit), and works with W&B offline.
"""

from __future__ import annotations

import json
import math
import shlex
from pathlib import Path

from lightning.pytorch.loggers import Logger, WandbLogger

from lightning_lars.report import plot
from lightning_lars.report.record import RunRecord
from lightning_lars.runtime.run_folder import RESULTS_FILE
from lightning_lars.runtime.run_log import to_run_file

PLANNED_LR_POINTS = 500  # samples of the pure schedule function for the LR plot


def wandb_logger_of(loggers: list[Logger]) -> WandbLogger | None:
    return next((lg for lg in loggers if isinstance(lg, WandbLogger)), None)


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.2f} %"


def _measured(value: float, text: str) -> str:
    """``text`` for a measured value; NaN (a run of no more batches than the throughput monitor skips as
    warm-up, 2 by default) reads ``- (too few steps to measure)``."""
    return text if math.isfinite(value) else "- (too few steps to measure)"


def _published(cfg) -> dict:
    return dict(cfg.get("published") or {})


def deviations(cfg) -> list[dict]:
    """The recipe's ``deviations:`` (technique, published, ours, why), as composed and checked."""
    return [dict(entry) for entry in cfg.get("deviations") or []]


def summary_rows(cfg, metrics: dict[str, float], record: RunRecord) -> list[tuple[str, str, str]]:
    """(quantity, this run, published) rows: top-1, time, epochs, global batch, hardware, throughput, target."""
    throughput = record.throughput
    images_per_sec = throughput["perf/images_per_sec"] if throughput is not None else float("nan")
    published = _published(cfg)
    rows = [
        ("top-1 (val)", _percent(metrics.get("val/top1")), _published_percent(published.get("top1"))),
        ("top-5 (val)", _percent(metrics.get("val/top5")), "-"),
        ("wall time", f"{metrics['time/wall_s']:.1f} s", str(published.get("time", "-"))),
        ("epochs", f"{record.epochs:.4g}", str(published.get("epochs", "-"))),
        ("optimizer steps", str(record.steps), "-"),
        ("global batch", str(cfg.batch.global_size), str(published.get("global_batch", "-"))),
        ("hardware", f"{record.world_size} x {record.accelerator}", str(published.get("hardware", "-"))),
        ("images/s (train, all devices)", _measured(images_per_sec, f"{images_per_sec:,.0f}"), "-"),
    ]
    if throughput is not None:
        wait = throughput["perf/data_wait_fraction"]
        rows.append(("data wait (share of train time)", _measured(wait, f"{100 * wait:.1f} %"), "-"))
    target = record.target
    if target is not None and target.target_top1 is not None:
        reached = (
            f"{target.time_to_target_s:.1f} s, {target.epochs_to_target:.2f} epochs"
            if target.reached
            else "not reached"
        )
        rows.append((f"time to {target.target_top1:g} % top-1", reached, str(published.get("time", "-"))))
    return rows


def _published_percent(value) -> str:
    return f"{value} %" if isinstance(value, (int, float)) else str(value or "-")


def results_table(cfg, metrics: dict[str, float], record: RunRecord, loggers: list[Logger]) -> str:
    rows = summary_rows(cfg, metrics, record)
    logger = wandb_logger_of(loggers)
    # experiment.dir is the run's files/ folder; its parent is what `wandb sync` takes
    wandb_dir = str(Path(logger.experiment.dir).parent) if logger is not None else None
    width = max(len(r[0]) for r in rows)
    ours_width = max(16, *(len(r[1]) for r in rows))
    lines = [f"\nResults: recipe {cfg.recipe_name}", f"{'':{width}}  {'this run':>{ours_width}}  published"]
    lines += [f"{name:{width}}  {ours:>{ours_width}}  {theirs}" for name, ours, theirs in rows]
    listed = deviations(cfg)
    lines.append(
        f"Deviations from the source ({len(listed)}):"
        if listed
        else "Deviations from the source: none listed"
    )
    lines += [
        f"  {d['technique']}: published {d['published']}; ours {d['ours']} ({d['why']})" for d in listed
    ]
    lines.append(f"W&B run: {wandb_dir or 'none (no W&B logger)'}")
    if wandb_dir and "offline-run" in wandb_dir:
        lines.append(f"  offline; upload it with: wandb sync {shlex.quote(wandb_dir)}")  # pasted whole
    return "\n".join(lines)


def results(cfg, metrics: dict[str, float], record: RunRecord) -> dict:
    """The machine-readable record of a run (``results.json``): final metrics, time-to-target, published."""
    out = {
        "recipe": cfg.recipe_name,
        "seed": int(cfg.seed),
        "global_batch": int(cfg.batch.global_size),
        "epochs": record.epochs,
        "steps": record.steps,
        "world_size": record.world_size,
        "metrics": {k: v for k, v in metrics.items() if math.isfinite(v)},
        "published": _published(cfg),
        "deviations": deviations(cfg),
        "hardware": record.hardware,
    }
    if record.throughput is not None:
        out["metrics"].update({k: v for k, v in record.throughput.items() if math.isfinite(v)})
    target = record.target
    if target is not None:
        out["metrics"].update(target.summary)
        out["evals"] = [dict(zip(("epoch", "step", "top1", "elapsed_s"), e)) for e in target.evals]
    return out


def lr_series(record: RunRecord) -> list[tuple[int, float, str]]:
    """(step, lr, kind): the planned schedule (the pure function over the whole run) and the applied values.

    Needs the hyperparameter samples: the applied values and the run's planned number of steps.
    """
    samples = record.hparams
    if samples is None:
        return []
    rows = []
    schedule = samples.lr_schedule
    if schedule is not None and samples.total_steps:
        stride = max(1, samples.total_steps // PLANNED_LR_POINTS)
        rows += [(step, float(schedule(step)), "planned") for step in range(0, samples.total_steps, stride)]
    rows += [(step, lr, "applied") for step, _, lr, *_ in samples.applied]
    return rows


def log_to_wandb(
    cfg, metrics: dict[str, float], record: RunRecord, loggers: list[Logger], png: Path | None = None
) -> bool:
    """Summary table + plots (and ``png``, the run's report.png) into the run's W&B run; False when there is no
    W&B logger."""
    logger = wandb_logger_of(loggers)
    if logger is None:
        return False
    import wandb  # only when W&B is in use

    run = logger.experiment
    rows = summary_rows(cfg, metrics, record)
    report = {
        "report/summary": wandb.Table(columns=["quantity", "this run", "published"], data=rows),
        "report/deviations": wandb.Table(
            columns=["technique", "published", "ours", "why"],
            data=[[d[k] for k in ("technique", "published", "ours", "why")] for d in deviations(cfg)],
        ),
    }
    if png is not None:  # the same figure as the run folder's, beside the table
        report["report/report_png"] = wandb.Image(str(png))
    lr = lr_series(record)
    if lr:
        table = wandb.Table(columns=["step", "lr", "kind"], data=lr)
        report["report/lr_schedule"] = wandb.plot.line(
            table, "step", "lr", stroke="kind", title="LR schedule"
        )
    target = record.target
    if target is not None and target.evals:
        table = wandb.Table(
            columns=["epoch", "step", "top1", "elapsed_s"], data=[list(e) for e in target.evals]
        )
        report["report/top1_vs_epoch"] = wandb.plot.line(
            table, "epoch", "top1", title="val top-1 (%) vs epoch"
        )
    trust = record.trust
    if trust is not None and trust.quantiles:
        data = [[step, q, v] for step, summary in trust.quantiles for q, v in summary.items()]
        table = wandb.Table(columns=["step", "quantile", "trust_ratio"], data=data)
        report["report/trust_ratio_quantiles"] = wandb.plot.line(
            table, "step", "trust_ratio", stroke="quantile", title="trust ratio over layers (quantiles)"
        )
    if trust is not None and trust.last is not None:
        last = trust.last
        table = wandb.Table(
            columns=["layer", "w_norm", "g_norm", "trust_ratio"],
            data=[list(r) for r in zip(last["names"], last["w_norm"], last["g_norm"], last["trust_ratio"])],
        )
        report["report/trust_ratio_per_layer"] = wandb.plot.bar(
            table, "layer", "trust_ratio", title=f"trust ratio per layer at step {last['step']}"
        )
    run.log(report)
    run.summary.update({k: v for k, v in results(cfg, metrics, record)["metrics"].items()})
    return True


def finish(cfg, metrics: dict[str, float], record: RunRecord, loggers: list[Logger]) -> dict:
    """Rank 0, after fit: print the table, write ``<output_dir>/results.json``, fill the W&B report (the W&B
    logger among ``loggers``, if any)."""
    written = results(cfg, metrics, record)
    out_dir = Path(cfg.paths.output_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / RESULTS_FILE).write_text(json.dumps(written, indent=2, default=str) + "\n")
    png = plot.write_report_png(cfg, record, out_dir)  # the curves, viewable without W&B
    log_to_wandb(cfg, metrics, record, loggers, png)
    said = "\n".join(
        [
            results_table(cfg, metrics, record, loggers),
            f"Report: {png if png else 'no report.png'}; numbers: {out_dir / RESULTS_FILE}",
        ]
    )
    print(said, flush=True)
    to_run_file(said)  # a cluster user reads train.log, not the terminal
    return written
