"""A recipe moved to a short run on a small data set: the large batch as a share of the training images, every
schedule mark scaled to fewer epochs, and the rules that move the recipe's LR to the large batch (the project's
linear rule, the square-root rule, MLCommons' reference point for LARS at the same share of ImageNet).
``benchmarks/bench_largebatch.py`` builds its runs from these.
"""

from __future__ import annotations

import math

from lightning_lars.core.errors import UserError
from lightning_lars.recipe import reference_points

MIN_STEPS = 3  # optimizer steps per epoch below which a "large batch" run is not a schedule at all
LR_RULES = ("linear", "sqrt", "reference")  # how a recipe's LR moves to the large batch (lr_overrides)


def large_batch(num_images: int, ratio: float) -> int:
    """``ratio`` of the training images, refused when it leaves fewer than MIN_STEPS steps per epoch."""
    best = math.floor(100 * (num_images // MIN_STEPS) / num_images) / 100 if num_images >= MIN_STEPS else 0
    works = f"the largest ratio that works here is {best:g}" if best > 0 else "use a larger data set"
    batch = round(ratio * num_images)
    if batch > num_images:
        raise UserError(f"ratio={ratio:g}: a batch of {batch} is more than the {num_images} images; {works}")
    if batch < 1 or num_images // batch < MIN_STEPS:
        steps = num_images // batch if batch >= 1 else 0
        raise UserError(
            f"ratio={ratio:g}: batch {batch} leaves {steps} steps per epoch on {num_images} images"
            f" (at least {MIN_STEPS} needed); {works}"
        )
    return batch


def scaled_marks(recipe, epochs: int, steps_per_epoch: int) -> list[str]:
    """Overrides moving every schedule mark of ``recipe`` (its composed config) to a run of ``epochs``.

    Marks in epochs are multiplied by epochs / recipe epochs; marks in steps keep their share of the recipe's
    run (LAMB's warmup 782 of 3519 steps), and Neumann's time unit of mu(t), one recipe epoch, stays one epoch."""
    sched, opt, trainer = recipe.scheduler, recipe.optimizer, recipe.trainer
    recipe_epochs = float(trainer.max_epochs)
    factor = epochs / recipe_epochs
    recipe_spe = recipe.epoch_length.num_train_images // recipe.batch.global_size
    recipe_steps = trainer.get("max_steps") or -1
    recipe_steps = recipe_steps if recipe_steps > 0 else recipe_epochs * recipe_spe
    total = epochs * steps_per_epoch
    out = [f"trainer.max_epochs={epochs}"] + (["trainer.max_steps=-1"] if "max_steps" in trainer else [])
    if sched.get("warmup_epochs") is not None:
        out.append(f"scheduler.warmup_epochs={sched.warmup_epochs * factor:.6g}")
    if sched.get("milestones") is not None:
        out.append(f"scheduler.milestones=[{','.join(f'{m * factor:.6g}' for m in sched.milestones)}]")
    for key in ("warmup_steps", "total_steps"):
        if sched.get(key) is not None:
            out.append(f"scheduler.{key}={max(1, round(sched[key] * total / recipe_steps))}")
    for key in ("sgd_steps", "reset_steps"):
        if opt.get(key):
            out.append(f"optimizer.{key}={max(1, round(opt[key] * total / recipe_steps))}")
    if opt.get("momentum_time_unit") is not None:
        out.append(
            f"optimizer.momentum_time_unit={opt.momentum_time_unit / recipe_spe * steps_per_epoch:.6g}"
        )
    return out


def reference_lr(ratio: float, epochs: int) -> tuple[str, float, float]:
    """MLCommons' reference point for LARS at the same share of ImageNet as ``ratio`` (nearest batch, in log):
    (entry, its LR, its warmup as the same share of our ``epochs``). Its LR is not scaled: LARS' LR multiplies
    the trust ratio, not the gradient, and the reference quotes it at its own batch."""
    batch = ratio * reference_points.NUM_TRAIN_IMAGES
    name = min(
        reference_points.names(), key=lambda n: abs(math.log(reference_points.entries()[n]["BS"] / batch))
    )
    entry = reference_points.entries()[name]
    hyper = entry["Hyperparams"]
    # opt_learning_rate_decay_steps counts the whole run in steps of BS images (reference_points.py)
    run_epochs = hyper["opt_learning_rate_decay_steps"] * entry["BS"] / reference_points.NUM_TRAIN_IMAGES
    warmup = hyper["opt_learning_rate_warmup_epochs"] / run_epochs * epochs
    return name, float(hyper["opt_base_learning_rate"]), warmup


def lr_overrides(recipe, batch: int, ratio: float, epochs: int, rule: str) -> list[str]:
    """The LR of ``recipe`` (composed) at a large ``batch`` under ``rule``: ``linear`` is the project's scale_lr
    (nothing to override), ``sqrt`` grows it with the square root of the batch, ``reference`` takes MLCommons'
    reference point for LARS (the caller keeps it to the MLPerf LARS recipe)."""
    if rule == "linear":
        return []
    base_lr, base_batch = float(recipe.scheduler.base_lr), int(recipe.scheduler.base_batch)
    if rule == "sqrt":
        return [
            f"scheduler.base_lr={base_lr * math.sqrt(batch / base_batch):.6g}",
            f"scheduler.base_batch={batch}",
        ]
    if rule != "reference":
        raise UserError(f"lr_rule={rule}: no such rule; pick from {' '.join(LR_RULES)}")
    _, lr, warmup = reference_lr(ratio, epochs)
    return [
        f"scheduler.base_lr={lr:g}",
        f"scheduler.base_batch={batch}",
        f"scheduler.warmup_epochs={warmup:.6g}",
    ]
