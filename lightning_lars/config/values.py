"""Types and ranges of config values, checked before anything is built (no YAML schema: the config's own
values are the reference).

Hydra passes ``trainer.max_epochs=abc`` on as the string ``"abc"``; it would surface minutes later as a
traceback from deep inside Lightning. Here a value given on the command line must have the kind of the value
it replaces (a number for a number, a bool for a bool), and the sizes the run is planned from must be
positive. Values the config leaves ``null`` have no kind to compare with: the target checks those.
"""

from __future__ import annotations

from typing import Any

from omegaconf import DictConfig, OmegaConf

from lightning_lars.core.errors import UserError

# Keys whose values must be integers >= 1 (-1 also allowed where Lightning reads it as "no limit").
POSITIVE_INTS = {
    "batch.global_size": False,
    "batch.max_per_device": False,
    "batch.bn_group": False,
    "trainer.max_epochs": True,   # -1: no epoch limit (with max_steps)
    "trainer.max_steps": True,    # -1: no step limit
    "data.num_classes": False,
}


def _kind(value: Any) -> str | None:
    """'bool', 'number' or None (anything else: strings, lists and nulls are not compared)."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    return None


def _raw(container: dict, dotted_key: str) -> Any:
    node: Any = container
    for part in dotted_key.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def check_override_types(overrides: list[str], base: DictConfig, cfg: DictConfig) -> None:
    """Each ``key=value`` override must keep the kind of the value it replaces in ``base`` (the config composed
    without the user's value overrides): ``seed=abc`` or ``scheduler.base_lr=abc`` is a one-line error."""
    before = OmegaConf.to_container(base, resolve=False)
    after = OmegaConf.to_container(cfg, resolve=False)
    for override in overrides:
        key, sep, text = override.lstrip("+~").partition("=")
        if not sep or override.startswith("~"):
            continue
        old, new = _raw(before, key), _raw(after, key)
        wanted, got = _kind(old), _kind(new)
        if wanted is None or got == wanted or (isinstance(new, str) and "${" in new):
            continue
        if new is None:
            continue  # null switches a feature off; the target says if it cannot
        example = str(old).lower() if wanted == "bool" else old
        kind = "true or false" if wanted == "bool" else ("an integer" if isinstance(old, int) else "a number")
        raise UserError(f"{key}={text}: expected {kind} (the config has {key}={example})")


def check_sizes(cfg: DictConfig) -> None:
    """The sizes the run is planned from: positive integers (``batch.max_per_device=0`` or ``trainer.max_epochs=0``
    would be accepted by Lightning and train nothing, or divide by zero later)."""
    values = OmegaConf.to_container(cfg, resolve=False)
    for key, minus_one_ok in POSITIVE_INTS.items():
        value = _raw(values, key)
        if value is None or (isinstance(value, str) and ("${" in value or value == "???")):
            continue
        if isinstance(value, bool) or not isinstance(value, int) or (value < 1 and not (minus_one_ok and value == -1)):
            allowed = "an integer >= 1" + (" (or -1: no limit)" if minus_one_ok else "")
            raise UserError(f"{key}={value}: expected {allowed}")
    seed = values.get("seed")
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**32:
        raise UserError(f"seed={seed}: expected an integer in 0..4294967295")
