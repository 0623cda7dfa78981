"""Composing the config and its command line: known recipes, the schema's and rules' checks, one-line errors."""

from __future__ import annotations

import dataclasses
import importlib.resources
import itertools
import re
import typing
from pathlib import Path

import yaml
from hydra import compose, initialize_config_dir
from hydra.core.config_store import ConfigStore
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import (
    ConfigCompositionException,
    HydraException,
    MissingConfigException,
    OverrideParseException,
)
from omegaconf import DictConfig, OmegaConf, open_dict
from omegaconf.errors import ConfigAttributeError, ConfigKeyError, OmegaConfBaseException

from lightning_lars.config import (  # schema: stores every schema dataclass in the ConfigStore
    override_text,
    recipe_source,
    rules,
    schema,
)
from lightning_lars.config.paths import (  # noqa: F401
    CONF_DIR,
    PACKAGE_DIR,
    PROJECT_ROOT,
    RECIPES_DIR,
    is_checkout,
    run_root,
)
from lightning_lars.config.set_by_the_run import check_overrides_not_set_by_the_run, set_by_the_run
from lightning_lars.config.trainer_arguments import TRAINER_ARGUMENTS, unknown_argument
from lightning_lars.core.errors import UserError


# The recipes are Hydra's ``recipe`` group: stored in Hydra's ConfigStore from RECIPES_DIR (the top-level recipes/
# of a checkout, lightning_lars/recipes in the wheel), so no conf/recipe folder or link is needed. A user's own
# recipes come from the recipe/ folders of their hydra.searchpath, as files.
def register_recipes() -> None:
    store = ConfigStore.instance()
    for path in sorted(RECIPES_DIR.glob("*.yaml")):
        store.store(group="recipe", name=path.stem, node=OmegaConf.load(path), package="_global_")


register_recipes()
recipe_source.install()  # a user's recipe file needs no `# @package _global_` line


def recipe_names(extra_dirs: tuple[Path, ...] = ()) -> list[str]:
    """Our recipes plus those in ``extra_dirs`` (the ``recipe/`` folders of a user's ``hydra.searchpath``)."""
    return sorted({p.stem for folder in (RECIPES_DIR, *extra_dirs) for p in folder.glob("*.yaml")})


def searchpath_overrides(overrides: list[str]) -> list[str]:
    """The ``hydra.searchpath=[...]`` overrides: config folders of the user's, e.g. one holding recipe/NAME.yaml."""
    return [o for o in overrides if o.lstrip("+").startswith("hydra.searchpath=")]


def user_recipe_dirs(overrides: list[str]) -> tuple[Path, ...]:
    """``<folder>/recipe`` for every ``file://`` or ``pkg://`` entry of the user's ``hydra.searchpath``."""
    folders = []
    for override in searchpath_overrides(overrides):
        try:
            value = OverridesParser.create().parse_override(override).value()
        except HydraException:  # OverrideParseException, or the lexer's own for a character it does not know
            raise UserError(override_text.parse_error_line([override])) from None
        for entry in value if isinstance(value, list) else [value]:
            scheme, _, where = str(entry).rpartition("://")
            if scheme == "pkg":
                package, _, sub = where.partition("/")
                try:
                    folders.append(Path(str(importlib.resources.files(package))) / sub / "recipe")
                except ModuleNotFoundError:
                    raise UserError(
                        f"hydra.searchpath names the package {package}, which is not installed"
                    ) from None
            else:  # file:// or a plain path
                folders.append(Path(where) / "recipe")
    return tuple(folders)


def check_overrides(overrides: list[str]) -> DictConfig:
    """Compose once with the user's overrides and turn Hydra's multi-line failures into one-line errors."""
    return compose_command_line(overrides)[0]


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
                f"unknown recipe '{match.group(1)}'; known recipes: {', '.join(known)}"
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
            missing = isinstance(
                err.__cause__, (ConfigAttributeError, ConfigKeyError)
            )  # not set by the config yet
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


# Hydra's ways to ask for a sweep: the flags, or the override that sets the mode a config can also set.
MULTIRUN_FLAGS = ("-m", "--multirun")


def is_multirun(argv: list[str]) -> bool:
    """Whether Hydra will run ``argv`` as a sweep (``-m``, ``--multirun`` or ``hydra.mode=MULTIRUN``)."""
    return any(a in MULTIRUN_FLAGS or a.replace(" ", "").upper() == "HYDRA.MODE=MULTIRUN" for a in argv)


def sweep_jobs(overrides: list[str]) -> list[list[str | None]]:
    """Each job of a sweep, as Hydra's basic sweeper expands it (``seed=0,1``, ``range(..)``, ``choice(..)``,
    ``glob(..)`` over a group's files): every combination in its order, one entry per override in
    ``overrides``' positions. An ``interval(..)``, for a sweeper of its own (Optuna, Ax), is None: that
    sweeper picks its values."""
    try:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            loader = GlobalHydra.instance().config_loader()  # glob(..) lists a group's options through it
            choices = []
            for override in OverridesParser.create(config_loader=loader).parse_overrides(overrides):
                if not override.is_sweep_override():
                    choices.append([override.input_line])
                elif override.is_discrete_sweep():
                    key = override.get_key_element()
                    choices.append([f"{key}={value}" for value in override.sweep_string_iterator()])
                else:
                    choices.append([None])
    except HydraException:  # OverrideParseException, or the lexer's own for a character it does not know
        raise UserError(
            f"{override_text.parse_error_line(overrides)} (a sweep is key=a,b, range(0,3) or choice(a,b))"
        ) from None
    return [list(job) for job in itertools.product(*choices)]


def compose_job(overrides: list[str]) -> DictConfig:
    """The config a run's job gets, composed in this process (tests, benchmarks): Hydra's node is made the current
    ``HydraConfig`` (``recipe_name`` reads ``${hydra:runtime.choices.recipe}``), then dropped, as a real run's job
    config holds no ``hydra`` node."""
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose(config_name="train", overrides=overrides, return_hydra_config=True)
    HydraConfig.instance().set_config(cfg)
    with open_dict(cfg):
        del cfg["hydra"]
    return cfg


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


def to_yaml(cfg: DictConfig) -> str:
    return yaml.safe_dump(OmegaConf.to_container(cfg, resolve=False, enum_to_str=True), sort_keys=False)
