"""The recipe keys ``epoch_length`` (how the source counted an epoch) and ``evaluation`` (when it evaluated),
checked where they need the planned run before `lightning_lars.recipe.epoch_steps` turns them into steps for
`lightning_lars.recipe.plan`. Their types and the rules between them are checked when the
config is composed (`lightning_lars.config.schema`, `lightning_lars.config.rules`); what needs the planned run
(the global batch, the total steps) is checked here, one line naming the recipe and the key.
"""

from __future__ import annotations

import math

from omegaconf import DictConfig

from lightning_lars.core.errors import UserError
from lightning_lars.recipe.epoch_steps import count_steps_per_epoch, counting_text, evaluation_steps
from lightning_lars.schedules.scaling import MIN_BN_SPAN, largest_global_size


def recipe_error(recipe: str, key: str, problem: str) -> UserError:
    return UserError(f"recipe {recipe}: {key} {problem}")


def epoch_length(
    recipe: str, cfg: DictConfig, num_images: int, global_batch: int, world: int = 1, counted: bool = False
) -> tuple[str, int, str]:
    """(mode, steps per epoch, how they were counted) from ``epoch_length``; one-line errors naming the key.
    ``counted``: ``num_images`` was counted in the data (else it is ``epoch_length.num_train_images``);
    ``world``: the devices the global batch is split over (1 where not known yet)."""
    spec = cfg.epoch_length
    mode = getattr(spec.mode, "name", spec.mode)  # the schema's EpochMode; a plain str in a hand-made config
    workers, steps = spec.get("workers"), spec.get("steps")
    if mode == "padded":
        if global_batch % workers:
            raise recipe_error(
                recipe,
                "epoch_length.workers",
                f"({workers}) must divide the global batch"
                f" {global_batch}: each worker's batch is B / workers",
            )
    per_epoch = count_steps_per_epoch(num_images, global_batch, mode, workers, steps)
    if per_epoch < 1:
        images = (
            f"the data has {num_images} training images"
            if counted
            else f"epoch_length.num_train_images={num_images}"
        )
        raise UserError(
            f"recipe {recipe}: {images}, fewer than one global batch of {global_batch} (every step takes a"
            f" full batch): {fitting_batch_advice(cfg, num_images, world, mode, workers, steps)}"
        )
    return mode, per_epoch, counting_text(num_images, global_batch, mode, workers, steps)


def fitting_batch_advice(cfg: DictConfig, num_images: int, world: int, mode: str, workers, steps) -> str:
    """The largest global batch that gives ``num_images`` at least one step and plans (the configured BN span,
    the cap per device), as the setting that makes it; without the BN span where none fits with it."""
    batch = cfg.batch
    cap, bn_group = batch.get("max_per_device"), batch.get("bn_group")
    for group in (bn_group, None) if bn_group is not None else (None,):
        limit = num_images
        while (size := largest_global_size(limit, world, cap, group)) is not None:
            fits = mode != "padded" or size % workers == 0
            if fits and count_steps_per_epoch(num_images, size, mode, workers, steps) >= 1:
                also = " batch.bn_group=null" if group != bn_group else ""
                return f"set batch.global_size={size}{also} (the largest that fits {num_images} images)"
            limit = size - 1
    return f"a global batch needs at least {MIN_BN_SPAN} images for BN: give the run more training images"


def eval_steps(recipe: str, cfg: DictConfig, epoch_ends: list[int], total_steps: int) -> list[int]:
    """Completed-update counts after which to evaluate (`lightning_lars.recipe.epoch_steps.evaluation_steps`),
    once the first evaluation is known to come before the run's end."""
    spec = cfg.evaluation  # exactly one period set, offsets >= 0: checked at composition (config.rules)
    every_epochs, every_steps = spec.get("every_n_epochs"), spec.get("every_n_steps")
    offset_epochs, offset_steps = spec.get("offset_epochs") or 0, spec.get("offset_steps") or 0
    first = epoch_ends[offset_epochs - 1] if 0 < offset_epochs <= len(epoch_ends) else math.inf
    by_epochs = every_epochs is not None
    if (by_epochs and offset_epochs and first >= total_steps) or (
        not by_epochs and offset_steps >= total_steps
    ):
        key, offset = ("offset_epochs", offset_epochs) if by_epochs else ("offset_steps", offset_steps)
        raise recipe_error(
            recipe,
            f"evaluation.{key}",
            f"({offset}) is past the run ({total_steps} steps): the first evaluation would never come",
        )
    return evaluation_steps(epoch_ends, total_steps, every_epochs, offset_epochs, every_steps, offset_steps)
