"""What a recipe will do, step by step, computed without data or a GPU: the one place that counts steps.

A recipe states how its source counted an epoch (``epoch_length``), when the source evaluated (``evaluation``) and
what we could not reproduce (``deviations``). From those, the global batch and the train-set size, `make_plan`
derives steps per epoch, total, warmup and eval steps and the LR schedule; `lightning_lars.training.run.build` runs
exactly that plan, and the recipe card (``python -m lightning_lars.recipe_card NAME``) and the golden tests print
and check it. Step convention: ``step`` is the number of optimizer updates done before this one (Lightning's
``trainer.global_step`` when the update is applied); eval steps are counts of completed updates after which an
evaluation runs, and the last one is always the final step.

A short run (``trainer.max_steps=N`` ending the run at least one whole epoch before the schedule's length in
steps, ``scheduler.total_steps``, where the recipe gives one, else before ``trainer.max_epochs``: a smoke test of
a real recipe) runs the first N steps of the full plan: LR, weight decay and evaluations follow the full
schedule, an evaluation comes at step N, and the plan says once that it stops early. A ``max_steps`` inside the
last epoch is how a recipe itself ends a run counted in steps (the TF/MLPerf ones); a schedule whose length
interpolates ``${trainer.max_steps}`` (a user's recipe) follows the run's length instead.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf

from lightning_lars.config import compose
from lightning_lars.recipe.keys import epoch_length, eval_steps, recipe_error
from lightning_lars.recipe.planned_run import RecipePlan, epochs_done
from lightning_lars.schedules.batch_growth import GROWTH_SCALES_LR, BatchGrowth, GrownBatchSchedule
from lightning_lars.schedules.build import build_lr_schedule
from lightning_lars.schedules.scaling import BatchPlan, plan_batch


def _batch_growth(recipe: str, cfg: DictConfig) -> tuple[dict[int, int], bool] | None:
    """``callbacks.batch_size_control``'s (growth table, scale_lr), read as config: planning builds no callback
    (the callback, `lightning_lars.callbacks.techniques.batch_size_control`, reads the same two keys)."""
    node = (cfg.get("callbacks") or {}).get("batch_size_control")
    if node is None:
        return None
    growth = OmegaConf.to_container(node.get("growth"), resolve=True) if node.get("growth") else {}
    try:
        BatchGrowth.from_table(1, growth)
    except (TypeError, ValueError):
        raise recipe_error(
            recipe, "callbacks.batch_size_control.growth", f"needs epoch: factor >= 1 pairs, got {growth}"
        ) from None
    return {int(e): int(f) for e, f in growth.items()}, bool(node.get("scale_lr", GROWTH_SCALES_LR))


def _total_steps(cfg: DictConfig, epoch_ends: list[int]) -> int:
    max_steps = cfg.trainer.get("max_steps")
    if max_steps is not None and max_steps >= 0:
        return int(max_steps)
    return epoch_ends[-1]


def _epoch_ends(steps_per_epoch: int, epochs: int, growth: BatchGrowth | None) -> list[int]:
    ends, done = [], 0
    for epoch in range(max(epochs, 1)):
        done += growth.steps_in_epoch(epoch) if growth else steps_per_epoch
        ends.append(done)
    return ends


def configured_world(trainer: DictConfig) -> int | None:
    """Devices x nodes where the config fixes them (``devices: 8`` or ``[0, 1]``), else None (``auto``, ``-1``)."""
    devices, nodes = trainer.get("devices"), trainer.get("num_nodes", 1)
    count = len(devices) if isinstance(devices, ListConfig) else devices
    if isinstance(count, bool) or not isinstance(count, int) or count < 1 or not isinstance(nodes, int):
        return None
    return count * nodes


def make_plan(
    cfg: DictConfig,
    recipe: str,
    num_train_images: int,
    devices: int | None,
    nodes: int,
    counted: bool = False,
    callbacks: Sequence[Any] = (),
    batch_plan: BatchPlan | None = None,
) -> RecipePlan:
    """The run of ``cfg`` on ``devices x nodes`` with ``num_train_images`` training images (``counted``: in the
    data, else the recipe's ``epoch_length.num_train_images``). ``callbacks``: the run's callbacks, built by the
    layer that may import them (`lightning_lars.training`); each with a ``planned_values(step, values, plan)``
    method sets the hyperparameter it changes per step. None (the composition checks): no callback is imported
    before the data files are checked. ``batch_plan``: the run's, already split over its devices (the
    datamodule's batch comes from it), else split here."""
    deviations = OmegaConf.to_container(cfg.deviations, resolve=True)  # four strings each: config.schema
    batch = cfg.batch
    world = configured_world(cfg.trainer) if devices is None else None
    if batch_plan is not None:
        plan = batch_plan
    elif world is not None:  # composition checks, devices set in the config: the batch plan is known
        plan = plan_batch(batch.global_size, world, 1, batch.max_per_device, batch.bn_group)
    elif devices is None:  # composition checks, "auto" devices: only the global batch is known yet
        plan = BatchPlan(int(batch.global_size), 1, int(batch.global_size), 1)
    else:
        plan = plan_batch(batch.global_size, devices, nodes, batch.max_per_device, batch.bn_group)
    mode, per_epoch, text = epoch_length(
        recipe, cfg, num_train_images, plan.global_size, plan.world_size, counted
    )
    growth = _batch_growth(recipe, cfg)
    batch_growth = BatchGrowth.from_table(per_epoch, growth[0]) if growth is not None else None
    max_epochs = cfg.trainer.get("max_epochs")
    max_steps = cfg.trainer.get("max_steps")
    epochs = int(max_epochs) if max_epochs is not None and max_epochs >= 0 else 0
    if epochs == 0 and (max_steps is None or max_steps < 0):
        raise recipe_error(
            recipe, "trainer.max_epochs", "or trainer.max_steps must be set: the run needs an end"
        )
    epoch_ends = _epoch_ends(per_epoch, epochs, batch_growth)
    total = _total_steps(cfg, epoch_ends)
    if total < 1:
        raise recipe_error(recipe, "trainer.max_steps", f"is {total}: a run needs at least one step")
    # a short run (module docstring): plan the full run, stop after `stop` of its steps. The full run is the
    # schedule's own length where the recipe gives it in steps (the TF/MLPerf sources' train_steps), else the
    # max_epochs run; not where the schedule's length is ${trainer.max_steps} itself (counted in steps).
    counted_in_steps = "total_steps" in cfg.scheduler and OmegaConf.is_interpolation(
        cfg.scheduler, "total_steps"
    )
    schedule_steps = None if counted_in_steps else cfg.scheduler.get("total_steps")
    stop = total
    if isinstance(schedule_steps, int) and total <= schedule_steps - per_epoch:
        total = min(schedule_steps, epoch_ends[-1])  # max_epochs may end the full run first
    elif not counted_in_steps and len(epoch_ends) > 1 and total <= epoch_ends[-2]:
        total = epoch_ends[-1]
    if total > epoch_ends[-1]:  # max_steps beyond max_epochs: extend with whole epochs of the last length
        last = epoch_ends[-1] - (epoch_ends[-2] if len(epoch_ends) > 1 else 0)
        while epoch_ends[-1] < total:
            epoch_ends.append(epoch_ends[-1] + last)
    evals = eval_steps(recipe, cfg, epoch_ends, total)
    evals = [s for s in evals if s < stop] + [stop]  # a short run also evaluates where it stops

    scheduler = OmegaConf.to_container(cfg.scheduler, resolve=True)
    if "total_steps" in scheduler and scheduler["total_steps"] is None:
        # a schedule in steps decays over the run unless the recipe says otherwise
        scheduler["total_steps"] = total
    # a grown batch shortens epochs: the base schedule spans the planned epochs, read at the same epoch
    epochs_of_run = epochs_done(epoch_ends, total) if growth is None else float(epochs)
    base_schedule = build_lr_schedule(scheduler, plan.global_size, per_epoch, epochs_of_run)
    schedule = base_schedule
    if growth is not None:  # the one grown schedule: the module's (callbacks.batch_size_control adopts it)
        schedule = GrownBatchSchedule(base=base_schedule, growth=batch_growth, scale_lr=growth[1])
    optimizer = cfg.optimizer
    momentum = optimizer.get("momentum")
    if momentum is None and optimizer.get("betas") is not None:
        momentum = optimizer.betas[0]
    return RecipePlan(
        recipe=recipe,
        num_train_images=num_train_images,
        epoch_mode=mode,
        epoch_mode_text=text,
        steps_per_epoch=per_epoch,
        epoch_end_steps=epoch_ends,
        total_steps=stop,
        planned_steps=total,
        warmup_steps=schedule.warmup_steps,
        decay_end_step=schedule.decay_end_step,
        eval_steps=evals,
        batch_plan=plan,
        lr_schedule=schedule,
        peak_lr=schedule.peak_lr,
        deviations=deviations,
        published=dict(OmegaConf.to_container(cfg.get("published") or {}, resolve=True)),
        value_hooks=[c for c in callbacks if hasattr(c, "planned_values")],
        batch_growth=batch_growth,
        base_weight_decay=float(optimizer.get("weight_decay") or 0.0),
        base_momentum=None if momentum is None else float(momentum),
    )


def planned_train_images(cfg: DictConfig, recipe: str) -> int:
    """The train-set size the recipe is planned at without data: ``epoch_length.num_train_images`` (a positive
    integer: config.schema and config.rules checked it at composition)."""
    return int(cfg.epoch_length.num_train_images)


def check_recipe(cfg: DictConfig, recipe: str) -> None:
    """The checks that need the planned run (an evaluation offset past the last step, a global batch the source's
    workers do not divide), at the planned train-set size: a bad recipe fails before anything starts."""
    make_plan(cfg, recipe, planned_train_images(cfg, recipe), devices=None, nodes=1)


def compose_recipe(name: str, overrides: list[str] | tuple[str, ...] = ()) -> DictConfig:
    """The recipe's config as the entry point composes it (same checks, one-line errors)."""
    return check_command_line([f"recipe={name}", *overrides])


def recipe_of(overrides: list[str] | tuple[str, ...]) -> str:
    """The recipe named on the command line (the last one wins, as in Hydra), else the default one."""
    names = [m.group(1) for o in overrides if (m := re.fullmatch(r"\+?recipe=(.*)", o))]
    return names[-1] if names else "demo"


def check_command_line(overrides: list[str]) -> DictConfig:
    """`lightning_lars.config.compose.compose_command_line` (one composition, then the rules), then the checks
    that need the planned run, in this process (the recipe card, `make check`, benchmarks): every mistake one
    line, before anything heavy starts."""
    cfg = compose.compose_command_line(overrides)
    check_recipe(cfg, recipe_of(overrides))
    return cfg
