"""The technique callbacks a recipe adds (batch-size control, the RMSprop warm-up blend, Fujitsu's weight-decay
schedule, BN without moving averages) are typed like conf/callbacks/default.yaml's entries: the recipe names each
one's schema in its defaults, so a misspelt key or a wrong type in it is refused while Hydra composes. Oracles:
the recipe files as YAML reads them, ``inspect.signature`` of each ``_target_``, and Hydra's own composition
(`compose_job`, as a run's job gets it)."""

from __future__ import annotations

import dataclasses
import inspect

import pytest
import yaml
from hydra.errors import ConfigCompositionException
from hydra.utils import get_object

from lightning_lars.config import groups
from lightning_lars.config.jobs import compose_job
from lightning_lars.config.paths import CONF_DIR, RECIPES_DIR

DEFAULT_ENTRIES = set(yaml.safe_load((CONF_DIR / "callbacks" / "default.yaml").read_text())) - {"defaults"}


def technique_entries() -> list[tuple[str, str, dict, list]]:
    """(recipe, callback name, its node, the recipe's defaults) for each callback a recipe adds with a target."""
    found = []
    for path in sorted(RECIPES_DIR.glob("*.yaml")):
        text = yaml.safe_load(path.read_text())
        for name, node in (text.get("callbacks") or {}).items():
            if name not in DEFAULT_ENTRIES and "_target_" in node:
                found.append((path.stem, name, node, text.get("defaults", [])))
    return found


ENTRIES = technique_entries()


def test_the_recipes_technique_callbacks_are_the_four_with_a_schema():
    techniques = set(groups.SCHEMAS["callback"]) - DEFAULT_ENTRIES
    assert {name for _, name, _, _ in ENTRIES} == techniques
    assert techniques == {
        "batch_size_control",
        "rmsprop_warmup",
        "weight_decay_schedule",
        "bn_without_moving_average",
    }


@pytest.mark.parametrize("recipe, name, node, defaults", ENTRIES, ids=[f"{r}:{n}" for r, n, _, _ in ENTRIES])
def test_a_recipe_names_its_technique_callbacks_schema_and_sets_its_fields(recipe, name, node, defaults):
    kind = groups.SCHEMAS["callback"][name]
    assert f"/{groups.schema_name('callback', name)}@callbacks.{name}" in defaults, recipe
    assert list(node) == [f.name for f in dataclasses.fields(kind)]
    # the fields are the target's arguments (none beyond them, where the schema takes no more)
    parameters = set(inspect.signature(get_object(node["_target_"])).parameters)
    fields = {f.name for f in dataclasses.fields(kind)} - {"_target_"}
    assert fields == parameters or ("**" in kind.ALSO_TAKES and fields <= parameters)


def compose_user_recipe(tmp_path, parent: str, body: str):
    (tmp_path / "recipe").mkdir()
    (tmp_path / "recipe" / "mine.yaml").write_text(
        f"# @package _global_\ndefaults:\n  - {parent}\n  - _self_\n{body}"
    )
    return compose_job(["recipe=mine", f"hydra.searchpath=[file://{tmp_path}]"])


@pytest.mark.parametrize(
    "parent, body, key",
    [
        ("mikami_68k", "callbacks:\n  batch_size_control:\n    scale_lr: maybe\n", "scale_lr"),
        ("mikami_68k", "callbacks:\n  batch_size_control:\n    growht: {5: 2}\n", "growht"),
        ("mikami_68k", "callbacks:\n  batch_size_control:\n    growth: {five: 2}\n", "five"),
        ("akiba_32k", "callbacks:\n  rmsprop_warmup:\n    center_epochs: ten\n", "center_epochs"),
        ("akiba_32k", "callbacks:\n  bn_without_moving_average:\n    momentum: 0.1\n", "momentum"),
        (
            "fujitsu_86k",
            "callbacks:\n  weight_decay_schedule:\n    schedule:\n      warmup_step: 540\n",
            "warmup_step",
        ),
    ],
)
def test_a_mistake_in_a_technique_callback_is_refused_as_hydra_composes(tmp_path, parent, body, key):
    with pytest.raises(ConfigCompositionException) as raised:
        compose_user_recipe(tmp_path, parent, body)
    assert key in f"{raised.value} {raised.value.__cause__}"


def test_the_same_keys_spelt_right_compose(tmp_path):
    """The control: the file above with the key and type the schema wants is composed, typed."""
    body = "callbacks:\n  batch_size_control:\n    scale_lr: true\n    growth: {4: 3}\n"
    cfg = compose_user_recipe(tmp_path, "mikami_68k", body)
    assert cfg.callbacks.batch_size_control.scale_lr is True
    assert dict(cfg.callbacks.batch_size_control.growth) == {4: 3, 5: 2}  # merged with the recipe's
