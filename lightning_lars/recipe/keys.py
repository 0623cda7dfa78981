"""The recipe keys of issue 11, checked: ``epoch_length`` (how the source counted an epoch), ``evaluation``
(when it evaluated) and ``deviations`` (what we could not reproduce). Each bad value is a one-line
`UserError` naming the recipe and the key; `lightning_lars.recipe.plan` turns the checked values into steps.
"""

from __future__ import annotations

import math

from omegaconf import DictConfig, OmegaConf

from lightning_lars.core.errors import UserError

EPOCH_MODES = ("drop_last", "padded", "fixed")
EPOCH_LENGTH_KEYS = {"mode", "workers", "steps", "num_train_images"}
EVALUATION_KEYS = {"every_n_epochs", "every_n_steps", "offset_epochs", "offset_steps"}
DEVIATION_FIELDS = ("technique", "published", "ours", "why")


def count_steps_per_epoch(num_images: int, global_batch: int, mode: str, workers: int | None = None,
                          steps: int | None = None) -> int:
    """Optimizer steps in one epoch as the source counted them.

    - ``drop_last``: ``N // B``, every step a full batch (PyTorch ``drop_last=True``, our loaders).
    - ``padded``: ``ceil(floor(N / W) / (B / W))``: each of the source's ``W`` data-parallel workers reads
      its shard and pads its last batch. The shard is ``int(N / W)`` as the MXNet code writes it
      (``get_epoch_size`` in NVIDIA's and Fujitsu's MLPerf ``common/fit.py``); ``W = 1`` is the global
      ``ceil(N / B)`` of later NVIDIA code.
    - ``fixed``: the source's own count, ``steps``.
    """
    if mode == "drop_last":
        return num_images // global_batch
    if mode == "padded":
        per_worker_batch = global_batch // workers
        return math.ceil((num_images // workers) / per_worker_batch)
    return int(steps)


def recipe_error(recipe: str, key: str, problem: str) -> UserError:
    return UserError(f"recipe {recipe}: {key} {problem}")


def check_deviations(recipe: str, deviations) -> list[dict]:
    """Every entry a mapping with exactly technique, published, ours, why, each a non-empty string."""
    if deviations is None:
        return []
    if OmegaConf.is_config(deviations):
        deviations = OmegaConf.to_container(deviations, resolve=True)
    if not isinstance(deviations, list):
        raise recipe_error(recipe, "deviations", "must be a list of {technique, published, ours, why} entries")
    for index, entry in enumerate(deviations):
        where = f"deviations[{index}]"
        if not isinstance(entry, dict):
            raise recipe_error(recipe, where, "must be a mapping {technique, published, ours, why}")
        for name in DEVIATION_FIELDS:
            if name not in entry or entry[name] is None or str(entry[name]).strip() == "":
                raise recipe_error(recipe, f"{where}.{name}", "is missing: every deviation needs technique,"
                                    " published, ours and why (strings)")
        extra = sorted(set(entry) - set(DEVIATION_FIELDS))
        if extra:
            raise recipe_error(recipe, f"{where}.{extra[0]}", "is not a deviation field; use only technique,"
                                " published, ours, why")
    return [{name: str(entry[name]) for name in DEVIATION_FIELDS} for entry in deviations]


def _check_keys(recipe: str, node: str, given, allowed: set[str]) -> dict:
    given = dict(given or {})
    unknown = sorted(set(given) - allowed)
    if unknown:
        raise recipe_error(recipe, f"{node}.{unknown[0]}", f"is not a key of {node} ({', '.join(sorted(allowed))})")
    return given


def positive_int(recipe: str, key: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise recipe_error(recipe, key, f"must be a positive integer, got {value!r}")
    return value


def epoch_length(recipe: str, cfg: DictConfig, num_images: int, global_batch: int) -> tuple[str, int, str]:
    """(mode, steps per epoch, how they were counted) from ``epoch_length``; one-line errors naming the key."""
    spec = _check_keys(recipe, "epoch_length", cfg.get("epoch_length"), EPOCH_LENGTH_KEYS)
    mode = spec.get("mode", "drop_last")
    if mode not in EPOCH_MODES:
        raise recipe_error(recipe, "epoch_length.mode", f"is '{mode}'; known modes: {', '.join(EPOCH_MODES)}")
    workers, steps = spec.get("workers"), spec.get("steps")
    if mode == "padded":
        workers = positive_int(recipe, "epoch_length.workers", workers)
        if global_batch % workers:
            raise recipe_error(recipe, "epoch_length.workers", f"({workers}) must divide the global batch"
                                f" {global_batch}: each worker's batch is B / workers")
        text = (f"padded: ceil(int({num_images} / {workers} workers) / {global_batch // workers} per worker),"
                " each worker pads its last batch")
    elif workers is not None:
        raise recipe_error(recipe, "epoch_length.workers", f"is only read in mode padded (mode is {mode}); remove it")
    if mode == "fixed":
        steps = positive_int(recipe, "epoch_length.steps", steps)
        text = f"fixed: the source's {steps} steps per epoch"
    elif steps is not None:
        raise recipe_error(recipe, "epoch_length.steps", f"is only read in mode fixed (mode is {mode}); remove it")
    if mode == "drop_last":
        text = f"drop_last: {num_images} // {global_batch}"
    per_epoch = count_steps_per_epoch(num_images, global_batch, mode, workers, steps)
    if per_epoch < 1:
        raise UserError(f"recipe {recipe}: global batch {global_batch} exceeds the {num_images} training images;"
                        " set batch.global_size=N with N at most the dataset size (e.g. debug=toy)")
    return mode, per_epoch, text


def eval_steps(recipe: str, cfg: DictConfig, epoch_ends: list[int], total_steps: int) -> list[int]:
    """Completed-update counts after which to evaluate, the final step always among them.

    ``every_n_epochs: k, offset_epochs: o``: after (1-based) epochs o+1, o+1+k, o+1+2k, ... (MLPerf's
    ``eval_offset``: epoch e, 0-based, is evaluated when e >= o and (e - o) % k == 0).
    ``every_n_steps: k, offset_steps: o``: after steps o+k, o+2k, ...
    """
    spec = evaluation_spec(recipe, cfg)
    every_epochs, every_steps = spec.get("every_n_epochs"), spec.get("every_n_steps")
    if (every_epochs is None) == (every_steps is None):
        raise recipe_error(recipe, "evaluation.every_n_epochs", "and evaluation.every_n_steps: set exactly one"
                            " (a recipe that sets every_n_steps sets every_n_epochs: null)")
    offset_epochs, offset_steps = spec.get("offset_epochs") or 0, spec.get("offset_steps") or 0
    for key, value in (("offset_epochs", offset_epochs), ("offset_steps", offset_steps)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise recipe_error(recipe, f"evaluation.{key}", f"must be an integer >= 0, got {value!r}")
    if every_epochs is not None:
        every = positive_int(recipe, "evaluation.every_n_epochs", every_epochs)
        if offset_steps:
            raise recipe_error(recipe, "evaluation.offset_steps", "goes with every_n_steps; use offset_epochs")
        offset_at = epoch_ends[offset_epochs - 1] if 0 < offset_epochs <= len(epoch_ends) else (
            0 if offset_epochs == 0 else math.inf)
        if offset_epochs and offset_at >= total_steps:
            raise recipe_error(recipe, "evaluation.offset_epochs", f"({offset_epochs}) is past the run"
                                f" ({total_steps} steps): the first evaluation would never come")
        steps = [epoch_ends[e - 1] for e in range(offset_epochs + 1, len(epoch_ends) + 1, every)]
    else:
        every = positive_int(recipe, "evaluation.every_n_steps", every_steps)
        if offset_epochs:
            raise recipe_error(recipe, "evaluation.offset_epochs", "goes with every_n_epochs; use offset_steps")
        if offset_steps >= total_steps:
            raise recipe_error(recipe, "evaluation.offset_steps", f"({offset_steps}) is past the run"
                                f" ({total_steps} steps): the first evaluation would never come")
        steps = list(range(offset_steps + every, total_steps + 1, every))
    return sorted({s for s in steps if s <= total_steps} | {total_steps})


def check_trainer_keys(recipe: str, cfg: DictConfig) -> None:
    """Evaluation is scheduled by ``evaluation``; Lightning's own knob would silently fight it."""
    if cfg.trainer.get("val_check_interval") is not None:
        raise recipe_error(recipe, "trainer.val_check_interval", "is not read: evaluation is scheduled by"
                            " evaluation.every_n_steps (and offset_steps); remove trainer.val_check_interval")


def evaluation_spec(recipe: str, cfg: DictConfig) -> dict:
    """``evaluation``; a recipe that still sets ``trainer.check_val_every_n_epoch`` fails naming the key that
    replaced it (Lightning's epochs are loader passes and cannot offset the first evaluation)."""
    spec = _check_keys(recipe, "evaluation", cfg.get("evaluation"), EVALUATION_KEYS)
    if (cfg.get("trainer") or {}).get("check_val_every_n_epoch") is not None:
        raise recipe_error(recipe, "trainer.check_val_every_n_epoch", "is no longer read: set"
                           " evaluation.every_n_epochs (and evaluation.offset_epochs) instead")
    return spec
