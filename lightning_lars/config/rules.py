"""What the typed schemas (`lightning_lars.config.schema`, `lightning_lars.config.groups`) cannot say, checked on
the composed config: keys that Hydra's ``+`` added past a schema, values left ``???``, the bounds a schema field
declares in its ``metadata``, keys read only in one mode, one of two keys, the trainer keys that ``evaluation``
replaces and the step counts the plan reads. Each failure is a one-line `UserError` naming the key and the fix.

Values are read unresolved: an interpolation (``${...}``) is left to the run, which resolves it.
"""

from __future__ import annotations

import dataclasses
import operator
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.nodes import ValueNode

from lightning_lars.config import schema
from lightning_lars.config.schema import COMPILE_AUTO, COMPILE_MODES
from lightning_lars.config.set_by_the_run import SET_BY_THE_RUN, set_by_the_run
from lightning_lars.core.errors import UserError

# The Trainer's counts the plan reads, where Lightning's -1 means "no limit": any other value below 1 trains nothing
PLANNED_COUNTS = ("max_epochs", "max_steps")
# A schema field's bounds (`lightning_lars.config.run_groups`), each as the test a value passes
BOUNDS = {"at_least": operator.ge, "above": operator.gt, "at_most": operator.le, "below": operator.lt}
# Lightning's own evaluation knobs, which would fight the steps `evaluation` plans.
REPLACED_BY_EVALUATION = {
    "check_val_every_n_epoch": "set evaluation.every_n_epochs (and evaluation.offset_epochs) instead",
    "val_check_interval": "set evaluation.every_n_steps (and evaluation.offset_steps) instead",
}


def check(cfg: DictConfig) -> None:
    """Every rule, in the order a user fixes them: keys the schema does not have, then values."""
    values = OmegaConf.to_container(cfg, resolve=False, enum_to_str=True)
    # a recipe of the user's that sets one: said before a schema would call it unknown
    for key in SET_BY_THE_RUN:
        group, _, name = key.partition(".")  # each a group's key (optimizer.lr)
        if (values.get(group) or {}).get(name) is not None:
            raise UserError(set_by_the_run(key))
    check_keys(cfg)
    check_trainer(values)
    compile_mode((values.get("model") or {}).get("compile"))
    check_epoch_length(values["epoch_length"])
    check_evaluation(values["evaluation"])
    check_deviations(values["deviations"])


def check_keys(node: Any, where: str = "") -> None:
    """Under a schema: no key it lacks (Hydra's ``+`` adds one past struct mode, ``+run.resume=true``; a file may
    add one to an open node) and, in the root's sections, no value left ``???`` (read unresolved: OmegaConf's
    ``missing_keys`` resolves every value, and a resolver of the model layer is not loaded yet)."""
    if isinstance(node, ListConfig):
        for index in range(len(node)):
            check_keys(node._get_node(index), f"{where}[{index}]")
        return
    if not isinstance(node, DictConfig):
        return
    kind = OmegaConf.get_type(node)
    fields = (
        {f.name: f.metadata for f in dataclasses.fields(kind)} if dataclasses.is_dataclass(kind) else None
    )
    for key in node:
        full_key = f"{where}.{key}" if where else str(key)
        if fields is not None and key not in fields and not {"**", key} & set(schema.also_takes(kind)):
            raise UserError(schema.unknown_key(full_key, kind))
        # a group's ??? (data.root) is the recipe's or the user's to fill: reported where it is read
        if OmegaConf.is_missing(node, key) and getattr(kind, "__module__", None) == schema.__name__:
            raise UserError(
                f"{full_key} is not set: give it a value ({full_key}=VALUE on the command line or in the recipe)"
            )
        child = node._get_node(key)
        if fields and fields.get(key) and not isinstance(child, (DictConfig, ListConfig)):
            value = child._value()
            check_bounds(full_key, value._value() if isinstance(value, ValueNode) else value, **fields[key])
        check_keys(child, full_key)


def check_bounds(key: str, value: Any, what: str = "", note: str = "", **bounds: Any) -> None:
    """A field's bounds (the schema's ``metadata``), which torch and Lightning would accept and then train badly
    with: ``batch.max_per_device=0`` or ``seed=-3`` trains nothing or divides by zero later, a learning rate <= 0
    diverges or stands still, momentum 1 never forgets a gradient. ``what``: the value, where it is no count."""
    if _is_left_to_the_run(value) or all(BOUNDS[name](value, bound) for name, bound in bounds.items()):
        return
    low, high = bounds.get("at_least", bounds.get("above")), bounds.get("at_most", bounds.get("below"))
    if high is None:
        wanted = f"{'>=' if 'at_least' in bounds else '>'} {low}"
    elif not what:  # an integer's range, both ends included
        wanted = f"in {low}..{high}"
    else:
        wanted = (
            f"in {'[' if 'at_least' in bounds else '('}{low}, {high}{']' if 'at_most' in bounds else ')'}"
        )
    if not what:
        raise UserError(f"{key}={_text(value)}: expected an integer {wanted}")
    raise UserError(f"{key}={_text(value)}: {what} must be {wanted}{f' ({note})' if note else ''}; set {key}")


def _is_left_to_the_run(value: Any) -> bool:
    return value is None or (isinstance(value, str) and ("${" in value or value == "???"))


def check_trainer(values: dict) -> None:
    """``evaluation`` replaces Lightning's own evaluation knobs; the counts the plan reads are integers."""
    trainer = values.get("trainer") or {}
    for key, fix in REPLACED_BY_EVALUATION.items():
        if trainer.get(key) is not None:
            raise UserError(
                f"trainer.{key} is not read: evaluation is scheduled by `evaluation`; {fix} and remove"
                f" trainer.{key}"
            )
    for key in PLANNED_COUNTS:
        value = trainer.get(key)
        wrong = not isinstance(value, int) or isinstance(value, bool) or (value < 1 and value != -1)
        if wrong and not _is_left_to_the_run(value):
            raise UserError(f"trainer.{key}={_text(value)}: expected an integer >= 1 (or -1: no limit)")


def _text(value: Any) -> str:
    return "null" if value is None else str(value).lower() if isinstance(value, bool) else str(value)


def compile_mode(value: Any, device_type: str | None = None) -> str | None:
    """The one check of ``model.compile`` (the schema types it Any: OmegaConf has no bool-or-enum type), and
    torch.compile's ``mode`` for it on ``device_type``: None (eager) for false and for auto off CUDA or while the
    device is unknown; reduce-overhead records CUDA graphs, so only on CUDA. Else a one-line `UserError`."""
    if value is False or value == "false" or _is_left_to_the_run(value):
        return None
    if value not in (COMPILE_AUTO, *COMPILE_MODES):
        raise UserError(
            f"model.compile={_text(value)}: expected false (eager), {COMPILE_AUTO} (compiled on CUDA, eager"
            f" elsewhere) or one of {', '.join(COMPILE_MODES)} (torch.compile's modes; reduce-overhead uses CUDA"
            " graphs, GPU only)"
        )
    if value == "reduce-overhead" and device_type not in (None, "cuda"):
        raise UserError(
            f"model.compile=reduce-overhead uses CUDA graphs, and this run is on {device_type}: set"
            " model.compile=default (or max-autotune-no-cudagraphs), or run on a GPU"
        )
    if value == COMPILE_AUTO:
        return "default" if device_type == "cuda" else None
    return value


def check_epoch_length(spec: dict) -> None:
    """``workers`` only (and always) in mode padded, ``steps`` only (and always) in mode fixed."""
    mode = spec["mode"]
    for key, needs in (("workers", "padded"), ("steps", "fixed")):
        if mode == needs and spec[key] is None:
            raise UserError(f"epoch_length.{key} is not set: mode {needs} needs it (epoch_length.{key}=N)")
        if mode != needs and spec[key] is not None:
            raise UserError(
                f"epoch_length.{key} is only read in mode {needs} (mode is {mode}); remove it with"
                f" epoch_length.{key}=null"
            )


def check_evaluation(spec: dict) -> None:
    """Exactly one of every_n_epochs / every_n_steps, each offset with its own period, offsets >= 0."""
    if (spec["every_n_epochs"] is None) == (spec["every_n_steps"] is None):
        raise UserError(
            "evaluation.every_n_epochs and evaluation.every_n_steps: set exactly one"
            " (with every_n_steps, set evaluation.every_n_epochs=null)"
        )
    if spec["every_n_epochs"] is not None and spec["offset_steps"]:
        raise UserError("evaluation.offset_steps goes with every_n_steps; use evaluation.offset_epochs")
    if spec["every_n_steps"] is not None and spec["offset_epochs"]:
        raise UserError("evaluation.offset_epochs goes with every_n_epochs; use evaluation.offset_steps")


def check_deviations(deviations: list[dict]) -> None:
    """The schema makes each field text; a blank one says nothing."""
    for index, entry in enumerate(deviations):
        for name, text in entry.items():
            if not text.strip():
                raise UserError(
                    f"deviations[{index}].{name} is empty: every deviation needs technique, published,"
                    " ours and why"
                )
