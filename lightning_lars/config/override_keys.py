"""The command line's keys checked by their text, before Hydra composes: a recipe's name, a key the run sets itself,
and a key inside a list that is not an index. Hydra applies ``data.pipeline.train.flip=false`` with OmegaConf's
``update``, which raises a bare ``ValueError`` (a traceback) for a list's item named by anything but its index;
the schema says which keys hold lists, so the mistake is one line naming both ways to change a list.
"""

from __future__ import annotations

import dataclasses
import functools
import typing

from lightning_lars.config import groups, schema
from lightning_lars.config.recipes import check_recipe_names
from lightning_lars.config.set_by_the_run import check_overrides_not_set_by_the_run
from lightning_lars.core.errors import UserError

# a group's key in the composed config: one option of `callback` per key under `callbacks`
GROUP_KEYS = {"callback": "callbacks.{name}"}


def _list_fields(kind: type, prefix: str) -> set[str]:
    """Dotted keys of ``kind``'s fields typed as lists, nested dataclasses included."""
    found, hints = set(), typing.get_type_hints(kind)
    for name in (f.name for f in dataclasses.fields(kind)):  # fields only: a ClassVar is no key
        hint, key = hints[name], f"{prefix}{name}"
        if typing.get_origin(hint) is list:
            found.add(key)
        elif dataclasses.is_dataclass(hint):
            found |= _list_fields(hint, f"{key}.")
    return found


@functools.cache
def list_keys() -> frozenset[str]:
    """Every key a schema types as a list: ``deviations``, ``data.pipeline.train``, ``optimizer.betas``, ..."""
    found = _list_fields(schema.TrainConfig, "")
    for kind in (schema.ModelConfig, schema.ResNetModelConfig):
        found |= _list_fields(kind, "model.")
    for group, options in groups.SCHEMAS.items():
        for name, kind in options.items():
            found |= _list_fields(kind, GROUP_KEYS.get(group, group).format(name=name) + ".")
    return frozenset(found)


def check_list_items(overrides: list[str]) -> None:
    """``data.pipeline.train.flip=false``: a list's item named by other than its index is one line."""
    lists = list_keys()
    for override in overrides:
        key = override.lstrip("+~").partition("=")[0]
        parts = key.split(".")
        for end in range(1, len(parts)):
            held = ".".join(parts[:end])
            if held in lists and not parts[end].isdigit():
                raise UserError(
                    f"{override}: {held} is a list, so {parts[end]!r} names no item of it; change an item by its"
                    f" index ({held}.0=...) or give the whole list ({held}=[...]; --cfg job shows the current one)"
                )


def check_override_keys(overrides: list[str]) -> None:
    """The checks of the command line's keys that need no composed config, in the order a user fixes them."""
    check_recipe_names(overrides)
    check_overrides_not_set_by_the_run(overrides)  # optimizer.lr=0.1: the key that sets it, not Hydra's `+`
    check_list_items(overrides)
