"""The recipe card: what a run of a recipe will do, printed (and plotted) without data or a GPU.

    python -m lightning_lars.recipe_card NAME [--devices G] [--nodes N] [--plot FILE.png] [key=value ...]

Steps per epoch and how the source counted them, warmup/decay/total steps, LR, weight decay and momentum
at named steps (the values the run's callbacks apply), eval steps, the batch plan on G devices x N nodes,
the deviations and the published claim. The plan lines are the ones a run prints
(`lightning_lars.training.run.build`) for the same config.

A LARS recipe's card ends with MLCommons' reference convergence point at its global batch (interpolated
between two entries as the RCP checker does) beside the recipe's own hyperparameters and epochs; a
``resnet_ref_*`` recipe's card also shows its entry's epochs to converge and its decay steps read both ways.
"""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig

from lightning_lars.core.errors import UserError
from lightning_lars.recipe import published, reference_points
from lightning_lars.recipe.planned_run import RecipePlan

MAX_PLOT_POINTS = 4000  # schedule samples per curve: enough for every step of most recipes


def named_steps(plan: RecipePlan) -> list[tuple[str, int]]:
    """(name, step) for the steps a reader checks: start, warmup, LR boundaries, batch growth, quarters, end."""
    total, warmup = plan.total_steps, plan.warmup_steps
    named = [("first update", 0)]
    if 0 < warmup < total:
        named += [("mid-warmup", warmup // 2), ("warmup done", warmup)]
    for step in plan.lr_schedule.drop_steps:  # step and piecewise schedules: where the LR drops
        named.append((f"LR boundary, epoch {plan.epoch_at(step):g}", step))
    previous = plan.global_batch(0)
    for index, end in enumerate(plan.epoch_end_steps):
        if end < total and plan.global_batch(end) != previous:
            previous = plan.global_batch(end)
            named.append((f"batch grows, epoch {index + 1}", end))
    named.append(("last update before 1st eval", plan.eval_steps[0] - 1))
    named += [(f"{q} % of the run", total * q // 100) for q in (25, 50, 75)]
    named.append(("last update", total - 1))
    seen, rows = set(), []
    for name, step in sorted(named, key=lambda item: item[1]):
        if 0 <= step < total and step not in seen:
            seen.add(step)
            rows.append((name, step))
    return rows


def _format(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, int):
        return str(value)
    return f"{value:.6g}"


def _packed(items: list[str], width: int) -> list[str]:
    """``items`` joined by ", " into lines of at most ``width`` characters (indent 2), never splitting one."""
    lines: list[str] = []
    current: list[str] = []
    for item in items:
        if current and len(", ".join([*current, item])) + 3 > width:
            lines.append("  " + ", ".join(current) + ",")
            current = []
        current.append(item)
    return lines + ["  " + ", ".join(current)] if current else lines


def target_line(plan: RecipePlan) -> str:
    """What `make check` tests this recipe against, and which statistic of a run it compares."""
    reason = published.no_target_reason(plan.published)
    if reason:
        return f"  target: none ({reason})"
    return (
        f"  judged by: {published.STATISTICS[published.statistic_of(plan.published)]} (published.statistic)"
    )


def card(plan: RecipePlan, devices: int, nodes: int) -> str:
    claim = plan.published
    lines = [
        f"Recipe {plan.recipe}: {claim.get('claim', '(no claim)')}",
        f"  source: {claim.get('source', '?')}",
        (
            f"  published: top-1 {claim.get('top1', '?')} in {claim.get('time', '?')},"
            f" {claim.get('epochs', '?')} epochs, global batch {claim.get('global_batch', '?')}"
            f" on {claim.get('hardware', '?')}"
        ),
        target_line(plan),
        "",
        (
            f"Plan on {devices} device(s) x {nodes} node(s), {plan.num_train_images:,} train images"
            " (the lines a run prints):"
        ),
    ]
    lines += [f"  {line}" for line in plan.describe()]
    if not plan.deviations:
        lines.append("  deviations: none listed")
    count = published.source_epoch_count(claim)
    evals = [
        f"{step} ({plan.epoch_at(step):.4g}"
        + (
            ""
            if count is None
            else f"; source {published.source_epoch(step, count, plan.num_train_images, plan.global_batch(step)):g}"
        )
        + ")"
        for step in plan.eval_steps
    ]
    lines += ["", "Evaluations after step (epoch" + ("; epoch in the source's log" if count else "") + "):"]
    lines += _packed(evals, width=110)
    rows = [(name, step, plan.epoch_at(step), plan.values(step)) for name, step in named_steps(plan)]
    keys = ["lr", "weight_decay", "momentum", "global_batch"]
    keys += sorted({k for *_, values in rows for k in values} - set(keys))
    header = ["", "step", "epoch", *keys]
    table = [
        [name, str(step), f"{epoch:.3f}", *(_format(values.get(k)) for k in keys)]
        for name, step, epoch, values in rows
    ]
    widths = [max(len(r[i]) for r in [header, *table]) for i in range(len(header))]
    lines += [
        "",
        "Values applied at update `step` (updates done before it; epoch: the source's epochs done by then):",
    ]
    lines += [
        "  "
        + "  ".join(
            cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in enumerate(zip(row, widths))
        )
        for row in [header, *table]
    ]
    return "\n".join(lines)


def plot(plan: RecipePlan, path: Path) -> Path:
    """LR, weight decay, momentum (and batch / blend when they vary) over the run, eval points marked."""
    try:
        import matplotlib  # optional (the dev extra), and only --plot needs it

        matplotlib.use("Agg")  # no display: the plot goes to a file
        import matplotlib.pyplot as plt  # after choosing the backend
    except ImportError as error:
        raise UserError(
            "--plot needs matplotlib: pip install 'lightning-lars[dev]' (or pip install matplotlib)"
        ) from error
    stride = max(1, plan.total_steps // MAX_PLOT_POINTS)
    steps = sorted(set(range(0, plan.total_steps, stride)) | {plan.total_steps - 1})
    values = [plan.values(s) for s in steps]
    keys = [
        k
        for k in ("lr", "weight_decay", "momentum", "global_batch", "sgd_fraction")
        if any(v.get(k) is not None for v in values)
        and (k in ("lr", "weight_decay", "momentum") or len({v.get(k) for v in values}) > 1)
    ]
    evals = [s - 1 for s in plan.eval_steps]  # the update that completes before each evaluation
    figure, axes = plt.subplots(len(keys), 1, sharex=True, figsize=(9, 1.9 * len(keys) + 0.9), squeeze=False)
    for axis, key in zip(axes[:, 0], keys):
        axis.plot(steps, [v.get(key) for v in values], lw=1.2, color="tab:blue")
        axis.plot(
            evals,
            [plan.values(s).get(key) for s in evals],
            "o",
            ms=3.5,
            color="tab:red",
            label="evaluation" if key == "lr" else None,
        )
        curve = [v.get(key) for v in values]
        if min(curve) > 0 and max(curve) / min(curve) > 100:  # step schedules: each drop visible
            axis.set_yscale("log")
        axis.set_ylabel(key.replace("_", " "))
        axis.grid(alpha=0.3)
        if plan.warmup_steps:
            axis.axvline(plan.warmup_steps, color="gray", ls="--", lw=0.8)
    axes[0, 0].legend(loc="upper right", fontsize=8)
    axes[0, 0].set_title(
        f"{plan.recipe}: {plan.total_steps} steps, {plan.steps_per_epoch} steps/epoch"
        f" ({plan.epoch_mode}), {len(plan.eval_steps)} evaluations; dashed: end of warmup",
        fontsize=9,
    )
    axes[-1, 0].set_xlabel("optimizer step")
    figure.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def _entry_lines(plan: RecipePlan) -> list[str]:
    """A ``resnet_ref_*`` recipe: its entry's epochs to converge and its decay steps as written and as epochs."""
    point, decay = reference_points.reference_point(plan.recipe), reference_points.decay_readings(plan.recipe)
    epochs = point.epochs_to_converge
    earlier = (
        f"; training_1.0.0 wrote this entry's value as {decay.earlier} (epochs)"
        if decay.earlier is not None
        else ""
    )
    return [
        "",
        f"MLCommons reference point {point.name} (mlperf_logging {reference_points.RCP_FILE}):",
        f"  epochs to {reference_points.TARGET_TOP1} % top-1 over {len(epochs)} runs: mean {point.mean_epochs:.4g}"
        f" (the RCP checker's: without the fastest and the slowest run), stdev {point.stdev_epochs:.3g},"
        f" range {min(epochs)}-{max(epochs)}",
        f"  opt_learning_rate_decay_steps as written: {decay.as_written} steps"
        f" = {decay.epochs_of_n_over_b:.3f} epochs of N/B = {decay.epochs_of_whole_steps:.3f} epochs of"
        f" N // B = {reference_points.NUM_TRAIN_IMAGES // point.batch} steps{earlier}",
        f"  this recipe: warmup {plan.warmup_steps} steps, decay {plan.decay_end_step - plan.warmup_steps} steps"
        f" (to step {plan.decay_end_step}), run {plan.total_steps} steps = {plan.total_epochs:.4g} epochs",
    ]


def _bn_span(plan: RecipePlan) -> str:
    span = plan.batch_plan.bn_group
    return str(span) if span is not None else f"{plan.batch_plan.per_device} (per device)"


def _comparison_lines(plan: RecipePlan) -> list[str]:
    """MLCommons' reference at the recipe's global batch beside the recipe's hyperparameters and epochs."""
    batch = plan.global_batch(0)
    reference = reference_points.at_batch(batch)
    lines = [
        "",
        f"MLCommons reference at global batch {batch} ({reference_points.RCP_FILE}): {reference.how}",
    ]
    if reference.point is None:
        return lines
    point = reference.point
    shown = reference.neighbours or (point,)
    header = ["", "this recipe", *(f"{p.name} (B {p.batch})" for p in shown)]
    rows = [
        ("peak LR", f"{plan.peak_lr:.6g}", "opt_base_learning_rate"),
        ("warmup epochs", f"{plan.epoch_at(plan.warmup_steps):.4g}", "opt_learning_rate_warmup_epochs"),
        ("momentum", _format(plan.base_momentum), "opt_momentum"),
        ("weight decay", _format(plan.base_weight_decay), "opt_weight_decay"),
        ("BN span", _bn_span(plan), "model_bn_span"),
    ]
    table = [[name, ours, *(_format(p.hyperparams.get(key)) for p in shown)] for name, ours, key in rows]
    run = f"{plan.total_epochs:.4g} (run)"
    table.append(["epochs", run, *(f"{p.mean_epochs:.4g} +- {p.stdev_epochs:.2g}" for p in shown)])
    widths = [max(len(r[i]) for r in [header, *table]) for i in range(len(header))]
    lines += ["  " + "  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in [header, *table]]
    source_epochs = plan.published.get("epochs", "?")
    lines.append(
        f"  epochs to {reference_points.TARGET_TOP1} % at batch {batch}: reference {point.mean_epochs:.4g}"
        f" +- {point.stdev_epochs:.2g}; the checker accepts a 5-run mean down to {point.min_epochs:.4g};"
        f" this recipe's source: {source_epochs} epochs"
    )
    return lines


def is_lars(cfg: DictConfig) -> bool:
    return str(cfg.optimizer.get("_target_", "")).rsplit(".", 1)[-1] == "LARS"


def has_mlperf_round(cfg: DictConfig) -> bool:
    """The recipe follows an MLPerf round (``mlperf.round``: the MLPerf recipes and the reference points)."""
    return (cfg.get("mlperf") or {}).get("round") is not None


def card_text(
    cfg: DictConfig, plan: RecipePlan, devices: int = 1, nodes: int = 1, plot_path: str | None = None
) -> str:
    """The whole card of ``plan`` (composed as ``cfg``): `card`, the MLCommons reference lines where they
    apply, and the plot written to ``plot_path``."""
    text = card(plan, devices, nodes)
    # its card needs the RCP file: an error names the install
    if plan.recipe.startswith(reference_points.RECIPE_PREFIX):
        text += "\n" + "\n".join(_entry_lines(plan))
    if is_lars(cfg) and has_mlperf_round(cfg):  # the RCPs judge MLPerf runs: nothing to say of the demo's
        try:
            text += "\n" + "\n".join(_comparison_lines(plan))
        except UserError as missing:  # mlperf-logging is optional: the rest of the card stands without it
            text += f"\n\nMLCommons reference at this batch: not shown ({missing})"
    if plot_path:
        text += f"\n\nplot: {plot(plan, Path(plot_path))}"
    return text
