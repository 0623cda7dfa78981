"""One home for each default: a value a config group option sets is either required by the callable Hydra
instantiates (no default in its signature) or that callable's default is the same value, so a user who builds
LARS, LAMB or a schedule in Python gets what the config would give them. The oracles are the option's YAML file
as OmegaConf reads it and ``inspect.signature`` of its ``_target_``, the real callable."""

from __future__ import annotations

import dataclasses
import inspect
import re
from typing import Any

import pytest
from hydra.utils import get_object
from omegaconf import OmegaConf

from lightning_lars.config import groups
from lightning_lars.config.paths import CONF_DIR

# read by `lightning_lars.schedules.build.build_lr_schedule` (scaled to the peak LR), not handed to the target
READ_BEFORE_THE_CALL = {"scheduler": {"base_lr", "base_batch"}}
HYDRA_KEYS = {"_target_", "_partial_", "defaults"}


def group_options() -> list[tuple[str, str, dict[str, Any]]]:
    """(group, option id, node) for every conf/<group>/*.yaml option and callback entry, and every node with a
    ``_target_`` inside one (a strategy's comm hook and state), as written (interpolations unresolved)."""
    found = []
    for group in sorted({*groups.SCHEMAS, "model"} - {"callback"}):
        for path in sorted((CONF_DIR / group).glob("*.yaml")):
            found.append((group, f"{group}/{path.stem}", load(path)))
    callbacks = load(CONF_DIR / "callbacks" / "default.yaml")
    found += [
        ("callbacks", f"callbacks/{name}", node) for name, node in callbacks.items() if name != "defaults"
    ]
    nested = [
        (group, f"{option}.{key}", value)
        for group, option, node in found
        for key, value in node.items()
        if isinstance(value, dict) and "_target_" in value
    ]
    return [option for option in found + nested if "_target_" in option[2]]


def load(path) -> dict[str, Any]:
    return OmegaConf.to_container(OmegaConf.load(path), resolve=False)


def comparable(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def set_elsewhere(value: Any) -> bool:
    """``???`` (the recipe or user gives it) or an interpolation (another key's value): no fixed value here."""
    return isinstance(value, str) and (value == "???" or "${" in value)


def default_of(parameter: inspect.Parameter, target: Any) -> Any:
    """The default a call without the argument gets (a dataclass field's factory called)."""
    fields = getattr(target, "__dataclass_fields__", {})
    field = fields.get(parameter.name)
    if field is not None and field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return parameter.default


def values_by_target(options) -> dict[tuple[str, str], list[Any]]:
    """(target, key) -> the values the options naming that target set: a target shared by several options
    (demo at 32 px, ImageNet at 224 px) may default to one of them; the others are that option's own choice."""
    values: dict[tuple[str, str], list[Any]] = {}
    for _, _, node in options:
        for key, value in node.items():
            values.setdefault((node["_target_"], key), []).append(comparable(value))
    return values


def disagreements(group: str, node: dict[str, Any], shared: dict | None = None) -> list[str]:
    target = get_object(node["_target_"])
    parameters = inspect.signature(target).parameters
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())
    ours = target.__module__.startswith(("lightning_lars", "callbacks"))
    found = []
    for key, value in node.items():
        if key in HYDRA_KEYS or key in READ_BEFORE_THE_CALL.get(group, ()):
            continue
        if key not in parameters:
            if not takes_any:
                found.append(f"{key}: {node['_target_']} takes no such argument")
            continue
        default = default_of(parameters[key], target)
        # a library's defaults are its own (the config sets what it changes); a nested target is its own option
        if not ours or default is inspect.Parameter.empty or set_elsewhere(value):
            continue
        if isinstance(value, dict) and "_target_" in value:
            continue
        allowed = (shared or {}).get((node["_target_"], key), [comparable(value)])
        if comparable(default) not in allowed:
            found.append(f"{key}: config {value!r}, {target.__qualname__} default {default!r}")
    return found


OPTIONS = group_options()
SHARED = values_by_target(OPTIONS)
# Disagreements not resolved yet, each a behaviour change for a Python caller or a run (left for the schema side
# of the one-home work): Checkpoint's None triggers mean Lightning's own choice, which tests and the preemption
# runs rely on; GroupedAllReduceState's caps are also its topology subclasses' (the config gives those 1, 4, 16,
# 25); the data modules' None pipeline reads DEFAULT_PIPELINE, whose crop ratio is 4/3 where the YAML has 1.333.
NOT_YET_ONE_HOME = {
    "callbacks/checkpoint": [
        "save_last: config True, Checkpoint default False",
        "every_n_epochs: config 1, Checkpoint default None",
        "save_on_train_epoch_end: config True, Checkpoint default None",
    ],
    "strategy/ddp_bucketed.ddp_comm_state": [
        "group_caps_mb: config [4, 16], GroupedAllReduceState default [1.0, 4.0, 16.0, 25.0]"
    ],
    **{
        f"data/{name}": [f"pipeline: config {{...}}, {module} default None"]
        for name, module in [
            ("demo", "FFCVDataModule"),
            ("imagenet", "FFCVDataModule"),
            ("imagefolder", "TorchvisionDataModule"),
            ("demo_imagefolder", "TorchvisionDataModule"),
        ]
    },
}


def test_every_group_option_is_walked():
    """The walk finds the options a reader sees: each optimizer and scheduler file, and the nested states."""
    walked = {option for _, option, _ in OPTIONS}
    for group in ("optimizer", "scheduler", "data", "model"):
        assert {f"{group}/{p.stem}" for p in (CONF_DIR / group).glob("*.yaml")} <= walked, group
    assert "strategy/ddp_bucketed.ddp_comm_state" in walked and "callbacks/checkpoint" in walked


@pytest.mark.parametrize("group, option, node", OPTIONS, ids=[option for _, option, _ in OPTIONS])
def test_a_value_the_config_sets_is_its_targets_default_or_required(group, option, node):
    found = [
        re.sub(r"config \{.*\}, ", "config {...}, ", line) for line in disagreements(group, node, SHARED)
    ]
    assert found == NOT_YET_ONE_HOME.get(option, []), option


def test_a_disagreement_is_reported():
    """The check fails where it should: LARS with the config's form changed, and a key LARS does not take."""
    node = load(CONF_DIR / "optimizer" / "lars.yaml")
    node["form"] = "nvidia"
    node["trust_ratio"] = 0.001
    found = disagreements("optimizer", node)
    assert found == [
        "form: config 'nvidia', LARS default 'mlperf'",
        "trust_ratio: lightning_lars.optim.lars.LARS takes no such argument",
    ]
