"""What the typed schema (`lightning_lars.config.schema`) cannot say, checked on the composed config: sizes that
must be positive, keys read only in one mode, one of two keys, the trainer keys that ``evaluation`` replaces, and
the kinds of values under the open groups (the Trainer's from `trainer_arguments`, our optimizers' and schedules'
numbers). Each failure is a one-line `UserError` naming the key and the fix.

Values are read unresolved: an interpolation (``${...}``) is left to the run, which resolves it.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf

from lightning_lars.config.trainer_arguments import (
    TRAINER_ARGUMENTS,
    TRAINER_TARGET,
    accepts,
    describe,
    unknown_argument,
)
from lightning_lars.core.errors import UserError

# Keys read as integers >= 1; True where -1 also counts (Lightning's "no limit").
POSITIVE_INTS = {
    "batch.global_size": False,
    "batch.max_per_device": False,
    "batch.bn_group": False,
    "trainer.max_epochs": True,  # -1: no epoch limit (with max_steps)
    "trainer.max_steps": True,  # -1: no step limit
    "data.num_classes": False,
    "epoch_length.num_train_images": False,
    "epoch_length.workers": False,
    "epoch_length.steps": False,
    "evaluation.every_n_epochs": False,
    "evaluation.every_n_steps": False,
}
SEED_RANGE = 2**32  # numpy's and Lightning's seed_everything accept 0 .. 2**32 - 1
# Arguments of our optimizers and schedules (lightning_lars/optim, lightning_lars/schedules) read as numbers: the
# groups stay open (int or float: a float schema field would print `base_lr: 10` as `10.0`), so their kind is here.
NUMBER_ARGUMENTS = {
    "optimizer": ("lr", "momentum", "weight_decay", "eps", "trust_coefficient", "max_grad_norm", "gamma"),
    "scheduler": ("base_lr", "base_batch", "start_lr", "end_lr", "end_lr_ratio", "power", "gamma", "warmup_epochs",
                  "warmup_steps", "total_steps", "decay_steps"),
}
# Lightning's own evaluation knobs, which would fight the steps `evaluation` plans.
REPLACED_BY_EVALUATION = {
    "check_val_every_n_epoch": "set evaluation.every_n_epochs (and evaluation.offset_epochs) instead",
    "val_check_interval": "set evaluation.every_n_steps (and evaluation.offset_steps) instead",
}


def check(cfg: DictConfig) -> None:
    """Every rule, in the order a user fixes them: keys the schema does not have, then values."""
    check_schema_keys(cfg)
    values = OmegaConf.to_container(cfg, resolve=False, enum_to_str=True)
    check_trainer(values)
    check_sizes(values)
    check_numbers(values)
    check_epoch_length(values["epoch_length"])
    check_evaluation(values["evaluation"])
    check_deviations(values["deviations"])


def check_schema_keys(node: Any, where: str = "") -> None:
    """In the schema's sections: no key the dataclass lacks (``+run.resume=true`` adds one, as Hydra lets ``+``
    add to any node) and no value left ``???``."""
    if isinstance(node, ListConfig):
        for index in range(len(node)):
            check_schema_keys(node._get_node(index), f"{where}[{index}]")
        return
    schema = OmegaConf.get_type(node) if isinstance(node, DictConfig) else None
    if schema is None or not dataclasses.is_dataclass(schema):
        return
    fields = [f.name for f in dataclasses.fields(schema)]
    also = getattr(schema, "ALSO_TAKES", ())
    for key in node:
        full_key = f"{where}.{key}" if where else str(key)
        if key in also:
            continue
        if key not in fields:
            raise UserError(f"unknown config key '{full_key}': nothing reads it; remove it or fix its spelling"
                            f" (its keys: {', '.join([*fields, *(f'+{name}' for name in also)])})")
        if OmegaConf.is_missing(node, key):
            raise UserError(f"{full_key} is not set: give it a value ({full_key}=VALUE on the command line or in"
                            " the recipe)")
        check_schema_keys(node._get_node(key), full_key)


def _raw(values: dict, dotted_key: str) -> Any:
    node: Any = values
    for part in dotted_key.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def _is_left_to_the_run(value: Any) -> bool:
    return value is None or (isinstance(value, str) and ("${" in value or value == "???"))


def check_trainer(values: dict) -> None:
    """Lightning's Trainer takes these keys with these kinds; ``evaluation`` replaces its own evaluation knobs."""
    trainer = values.get("trainer") or {}
    for key, fix in REPLACED_BY_EVALUATION.items():
        if trainer.get(key) is not None:
            raise UserError(f"trainer.{key} is not read: evaluation is scheduled by `evaluation`; {fix} and remove"
                            f" trainer.{key}")
    if trainer.get("_target_") != TRAINER_TARGET:
        return
    for key, value in trainer.items():
        if key.startswith("_") and key.endswith("_"):  # _target_, _partial_, ...: Hydra's, not the Trainer's
            continue
        if key not in TRAINER_ARGUMENTS:
            raise UserError(unknown_argument(key))
        accepted = TRAINER_ARGUMENTS[key]
        if not (isinstance(value, str) and "${" in value) and not accepts(accepted, value):
            raise UserError(f"trainer.{key}={_text(value)}: expected {describe(accepted)}")


def _text(value: Any) -> str:
    return "null" if value is None else str(value).lower() if isinstance(value, bool) else str(value)


def check_sizes(values: dict) -> None:
    """The sizes the run is planned from: positive integers (``batch.max_per_device=0`` or
    ``trainer.max_epochs=0`` would be accepted by Lightning and train nothing, or divide by zero later)."""
    for key, minus_one_ok in POSITIVE_INTS.items():
        value = _raw(values, key)
        if _is_left_to_the_run(value):
            continue
        if isinstance(value, bool) or not isinstance(value, int) or (value < 1 and not (minus_one_ok and value == -1)):
            allowed = "an integer >= 1" + (" (or -1: no limit)" if minus_one_ok else "")
            raise UserError(f"{key}={_text(value)}: expected {allowed}")
    seed = values["seed"]
    if not _is_left_to_the_run(seed) and not 0 <= seed < SEED_RANGE:
        raise UserError(f"seed={seed}: expected an integer in 0..{SEED_RANGE - 1}")


def check_numbers(values: dict) -> None:
    """Our optimizers' and schedules' numeric arguments: ``scheduler.base_lr=abc`` fails here, not mid-run."""
    for group, names in NUMBER_ARGUMENTS.items():
        node = values.get(group) or {}
        for name in names:
            value = node.get(name)
            if not _is_left_to_the_run(value) and (isinstance(value, bool) or not isinstance(value, (int, float))):
                raise UserError(f"{group}.{name}={_text(value)}: expected a number")


def check_epoch_length(spec: dict) -> None:
    """``workers`` only (and always) in mode padded, ``steps`` only (and always) in mode fixed."""
    mode = spec["mode"]
    for key, needs in (("workers", "padded"), ("steps", "fixed")):
        if mode == needs and spec[key] is None:
            raise UserError(f"epoch_length.{key} is not set: mode {needs} needs it (epoch_length.{key}=N)")
        if mode != needs and spec[key] is not None:
            raise UserError(f"epoch_length.{key} is only read in mode {needs} (mode is {mode}); remove it with"
                            f" epoch_length.{key}=null")


def check_evaluation(spec: dict) -> None:
    """Exactly one of every_n_epochs / every_n_steps, each offset with its own period, offsets >= 0."""
    if (spec["every_n_epochs"] is None) == (spec["every_n_steps"] is None):
        raise UserError("evaluation.every_n_epochs and evaluation.every_n_steps: set exactly one"
                        " (with every_n_steps, set evaluation.every_n_epochs=null)")
    for key in ("offset_epochs", "offset_steps"):
        if isinstance(spec[key], int) and spec[key] < 0:
            raise UserError(f"evaluation.{key}={spec[key]}: expected an integer >= 0")
    if spec["every_n_epochs"] is not None and spec["offset_steps"]:
        raise UserError("evaluation.offset_steps goes with every_n_steps; use evaluation.offset_epochs")
    if spec["every_n_steps"] is not None and spec["offset_epochs"]:
        raise UserError("evaluation.offset_epochs goes with every_n_epochs; use evaluation.offset_steps")


def check_deviations(deviations: list[dict]) -> None:
    """The schema makes each field text; a blank one says nothing."""
    for index, entry in enumerate(deviations):
        for name, text in entry.items():
            if not text.strip():
                raise UserError(f"deviations[{index}].{name} is empty: every deviation needs technique, published,"
                                " ours and why")
