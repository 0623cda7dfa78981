"""One home for each default: a value a config group option sets is either required by the callable Hydra
instantiates (no default in its signature) or that callable's default is the same value, so a user who builds
LARS, LAMB or a schedule in Python gets what the config would give them; and the typed schemas hold no value at
all, so the YAML file is the one home of each. The oracles are the option's YAML file as OmegaConf reads it,
Hydra's composition of it, OmegaConf's reading of each schema and ``inspect.signature`` of its ``_target_``."""

from __future__ import annotations

import dataclasses
import inspect
import re
import typing
from typing import Any

import pytest
import yaml
from helpers import group_config, unset_keys
from hydra.utils import get_object
from omegaconf import OmegaConf

from lightning_lars.config import groups, schema
from lightning_lars.config.paths import CONF_DIR

# read by `lightning_lars.schedules.build.build_lr_schedule` (scaled to the peak LR), not handed to the target
READ_BEFORE_THE_CALL = {"scheduler": {"base_lr", "base_batch"}}
HYDRA_KEYS = {"_target_", "_partial_", "defaults"}


def group_options() -> list[tuple[str, str, dict[str, Any]]]:
    """(group, option id, node) for every conf/<group>/*.yaml option and callback entry, and every node with a
    ``_target_`` inside one (a strategy's comm hook and state), as written (interpolations unresolved)."""
    found = []
    for group in sorted({*groups.SCHEMAS, "model", "trainer"} - {"callback"}):
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
# Disagreements not resolved yet, each a behaviour change for a Python caller or a run (a run's resolved config
# must stay byte-identical, so the YAML side cannot move): Checkpoint's None triggers mean Lightning's own
# choice, which tests and the preemption runs rely on; GroupedAllReduceState's caps are also its topology
# subclasses' (the config gives those 1, 4, 16, 25); the data modules' None pipeline reads DEFAULT_PIPELINE, which
# the ImageNet configs spell out op by op for overrides to edit.
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
    """The walk finds the options a reader sees: each group file that names a ``_target_`` (strategy/auto names
    Lightning's choice), and the nested states."""
    walked = {option for _, option, _ in OPTIONS}
    for group in ("optimizer", "scheduler", "data", "model", "strategy", "logger", "trainer"):
        files = [path for path in (CONF_DIR / group).glob("*.yaml") if "_target_" in load(path)]
        assert files and {f"{group}/{path.stem}" for path in files} <= walked, group
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


# Every schema the config's files name: the root's, the models', each group option's and callback entry's
SCHEMAS = sorted(
    {schema.TrainConfig, schema.ModelConfig, schema.ResNetModelConfig}
    | {kind for options in groups.SCHEMAS.values() for kind in options.values()},
    key=lambda kind: kind.__name__,
)
# The root's fields that conf/train.yaml's defaults list fills with a group (``optional local``: local)
GROUP_SLOTS = {
    next(iter(entry)).split()[-1]
    for entry in yaml.safe_load((CONF_DIR / "train.yaml").read_text())["defaults"]
    if isinstance(entry, dict)
}


def leaf_keys(kind: type, where: str = "") -> set[str]:
    """The dotted keys of a schema's values (a nested schema's fields, not the section holding them)."""
    hints = typing.get_type_hints(kind)
    found = set()
    for field in dataclasses.fields(kind):
        key = f"{where}.{field.name}" if where else field.name
        nested = hints[field.name]
        found |= leaf_keys(nested, key) if dataclasses.is_dataclass(nested) else {key}
    return found


@pytest.mark.parametrize("kind", SCHEMAS, ids=lambda kind: kind.__name__)
def test_a_schema_gives_types_and_no_value(kind):
    """OmegaConf reads every field of a schema as ``???``: the value comes from the YAML file, its one home
    (the root's group slots excepted, which the defaults list fills)."""
    assert unset_keys(OmegaConf.structured(kind)) == leaf_keys(kind) - GROUP_SLOTS
    assert GROUP_SLOTS & leaf_keys(schema.TrainConfig) == {
        "data",
        "model",
        "optimizer",
        "scheduler",
        "trainer",
        "strategy",
        "callbacks",
        "logger",
        "paths",
    }


FILES_WITH_A_SCHEMA = sorted(
    {(group, name) for group, options in groups.SCHEMAS.items() if group != "callback" for name in options}
    | {("model", path.stem) for path in (CONF_DIR / "model").glob("*.yaml")}
    | {("callbacks", "default")}
)


def test_each_option_file_gives_every_key_its_schema_leaves_unset():
    """Hydra composes the file over its schema: what stays ``???`` is what the file itself writes as ``???``
    (``base_lr``, ``data.root``: the recipe's or the user's to give), nested nodes (a strategy's comm state)
    included."""
    for group, name in FILES_WITH_A_SCHEMA:
        written = unset_keys(OmegaConf.load(CONF_DIR / group / f"{name}.yaml"))
        assert unset_keys(group_config(group, name)) == written, f"{group}/{name}"
