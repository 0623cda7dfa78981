"""Composing the command line into the config: unknown recipes, the schema's and rules' checks, one-line errors."""

from __future__ import annotations

import dataclasses
import re
import typing

import yaml
from hydra import compose, initialize_config_dir
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import ConfigCompositionException, MissingConfigException, OverrideParseException
from omegaconf import DictConfig
from omegaconf.errors import ConfigAttributeError, ConfigKeyError, OmegaConfBaseException

from lightning_lars.config import override_text, recipe_source, recipes, rules, schema
from lightning_lars.config.paths import CONF_DIR
from lightning_lars.config.recipes import recipe_names, searchpath_overrides, user_recipe_dirs
from lightning_lars.config.set_by_the_run import check_overrides_not_set_by_the_run, set_by_the_run
from lightning_lars.config.trainer_arguments import unknown_argument
from lightning_lars.config.trainer_signature import TRAINER_ARGUMENTS
from lightning_lars.core.errors import UserError


def compose_command_line(overrides: list[str]) -> tuple[DictConfig, list[str]]:
    """The composed config and the overrides as Hydra must get them: a ``trainer.KEY=value`` that Lightning's
    Trainer takes but the config does not set yet gets its ``+`` here (``trainer.max_steps=1`` works as a Trainer
    user expects). Hydra checks types against `lightning_lars.config.schema` while it composes, then
    `lightning_lars.config.rules` checks what types cannot say; every mistake is a one-line `UserError`.
    """
    overrides = [override_text.quote_plain_text(o) for o in overrides]  # data.root=/data/données
    known = recipe_names(user_recipe_dirs(overrides))
    for override in overrides:
        match = re.fullmatch(r"\+?recipe=(.*)", override)
        if match and match.group(1) not in known:
            raise UserError(
                f"{recipes.unknown_recipe(match.group(1), known)}"
                " (`make recipes` lists them with their published results; a folder of your own recipes:"
                " hydra.searchpath=[file:///abs/conf] with conf/recipe/NAME.yaml)"
            )
    given = [o for o in overrides if not o.startswith(("hydra.", "hydra/", "-"))]
    check_overrides_not_set_by_the_run(given)
    # hydra.searchpath stays: it decides which config folders compose sees (a user's own recipes)
    user = given + searchpath_overrides(overrides)
    while True:
        try:
            cfg = _compose(user)
            break
        except ConfigCompositionException as err:
            # not set by the config yet
            missing = isinstance(err.__cause__, (ConfigAttributeError, ConfigKeyError))
            key = err.__cause__.full_key if missing else None
            plussed = [f"+{o}" if key and o.startswith(f"{key}=") else o for o in user]
            if plussed != user and _takes_without_plus(err, key):
                user = plussed
                continue
            raise UserError(explain_composition_error(err, user)) from None
    rules.check(cfg)
    parsed = OverridesParser.create().parse_overrides(given)
    rules.check_bools(cfg, [(o.key_or_group, o.value()) for o in parsed if not o.is_sweep_override()])
    rewritten = dict(zip(given, user))
    return cfg, [rewritten.get(o, o) for o in overrides]


def _takes_without_plus(err: ConfigCompositionException, dotted_key: str) -> bool:
    """A key the config does not set but its node takes: a Lightning Trainer argument, or one a schema names in
    ``ALSO_TAKES`` (``model.model_kwargs``)."""
    parent, _, name = dotted_key.rpartition(".")
    return (parent == "trainer" and name in TRAINER_ARGUMENTS) or name in schema.also_takes(
        getattr(err.__cause__, "object_type", None)
    )


def explain_composition_error(err: ConfigCompositionException, overrides: list[str] = ()) -> str:
    """One line for Hydra's composition failure, from OmegaConf's exception: its reason, the ``full_key``, and the
    fix its schema (``object_type``) implies, the type wanted or the keys it has. A config file's mistake names
    the file, which Hydra gives only in its text."""
    cause = err.__cause__ or err.__context__  # a config file's error: raised inside the except, not from it
    if not isinstance(cause, OmegaConfBaseException) or not cause.full_key:
        return " ".join(str(err).split())
    # Hydra names the file, and the override that failed, only in its text: a list item's full_key lacks the
    # list's key (`+deviations=[{..., source: x}]` fails at 'source')
    in_file = re.match(r"In '([^']+)'", str(err))
    where = f"in {in_file.group(1)}.yaml: " if in_file else ""
    override = re.search(r"override '?([^'\s]+)", str(err))  # key=value, or the key alone
    given = override.group(1).rstrip("'.").lstrip("+") if override else ""
    given_key = given.lstrip("~").partition("=")[0]
    key, kind = cause.full_key, cause.object_type if dataclasses.is_dataclass(cause.object_type) else None
    first = str(cause.msg).splitlines()[0].rstrip(".")
    if isinstance(cause, (ConfigAttributeError, ConfigKeyError)):  # a key the schema or the config lacks
        if key == "recipe" and in_file:
            return (
                f"{where}the recipe's keys land under 'recipe': start the file with the line"
                " # @package _global_, or leave its package line out"
            )
        if set_by_the_run(key):  # a user's recipe file that sets optimizer.lr: not unknown, the run's own
            return where + set_by_the_run(key)
        if kind is None and key.startswith("trainer.") and key.count(".") == 1:
            return unknown_argument(key.partition(".")[2])  # Lightning's own would have got its + above
        inside = key.startswith(given_key) and ("." in key or kind is schema.TrainConfig)
        shown = key if inside or kind is None else f"{given_key or kind.__name__}: {key}"  # a list item's key
        plus = next((o for o in overrides if o.startswith(f"{key}=")), "")
        return where + schema.unknown_key(shown, kind, plus)
    field = schema.field_type(key.rpartition(".")[2].partition("[")[0], kind)
    if field is None:
        return " ".join(str(err).split())
    value = f"{where}{given if '=' in given else key}"
    if kind.__module__ != schema.__name__:  # a group's key: the kind wanted first, as a user thinks of it
        numeric = set(typing.get_args(field) or [field]) - {type(None)} <= {int, float}
        wanted = "a number" if numeric else schema.describe(field)
        return f"{value}: expected {wanted}; set {key} to {schema.describe(field)} ({first})"
    if issubclass(kind, schema.ModelConfig):
        return f"{value}: {first}"
    return f"{value}: {first}; set {key} to {schema.describe(field)}"


def _compose(overrides: list[str]) -> DictConfig:
    """Hydra's compose, with its parse and missing-group errors as one line (composition errors pass)."""
    try:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            return compose(config_name="train", overrides=overrides)
    except OverrideParseException:
        raise UserError(override_text.parse_error_line(overrides)) from None
    except MissingConfigException as err:
        first = str(err).splitlines()[0]
        raise UserError(
            f"{first} (`python -m lightning_lars.train --help` lists the config groups)"
        ) from None
    except yaml.MarkedYAMLError as err:  # a config file of the user's (their recipe) that is no YAML
        raise UserError(recipe_source.yaml_error_line(err)) from None
    except ValueError as err:  # OmegaConf.update reads the key after a list as an index: int('x')
        named = re.fullmatch(r"invalid literal for int\(\) with base 10: '([^']*)'", str(err))
        for override in overrides if named else ():
            parts = override.lstrip("+~").partition("=")[0].split(".")
            if named.group(1) in parts[1:]:
                items = ".".join(parts[: parts.index(named.group(1), 1)])
                raise UserError(
                    f"{override}: {items} is a list; name an item by its position ({items}.0...) or give"
                    f" the whole list ({items}=[...])"
                ) from None
        raise


def explain_instantiation_error(err: Exception) -> str:
    """One line for a `_target_` that rejected its arguments, e.g. a misspelt `+data.foo=1`."""
    text = " ".join(str(err).split())
    unexpected = re.search(r"unexpected keyword argument '([^']+)'", text)
    node = re.search(r"full_key: (\S+)", text)
    target = re.search(r"target '([^']+)'", text)
    if unexpected:
        where = f"{node.group(1)}." if node else ""
        why = f"{target.group(1) if target else 'its target'} takes no such argument; remove it or fix its spelling"
        return schema.unknown_key(f"{where}{unexpected.group(1)}", why=why)
    if isinstance(err.__cause__, UserError):
        return str(err.__cause__)
    return text
