"""The recipes Hydra composes from: ours stored in its ConfigStore as the ``recipe`` group, and a user's own found
in the ``recipe/`` folders of their ``hydra.searchpath`` (a file there starts with ``# @package _global_``, as
ours do, or Hydra puts its keys under ``recipe``)."""

from __future__ import annotations

import difflib
import importlib.resources
import re
from pathlib import Path

import yaml
from hydra.core.config_store import ConfigStore
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException
from omegaconf import OmegaConf

from lightning_lars.config.paths import RECIPES_DIR
from lightning_lars.core.errors import UserError


# The recipes are Hydra's ``recipe`` group: stored in Hydra's ConfigStore from RECIPES_DIR (the top-level recipes/
# of a checkout, lightning_lars/recipes in the wheel), so no conf/recipe folder or link is needed. A user's own
# recipes come from the recipe/ folders of their hydra.searchpath, as files.
def register_recipes() -> None:
    store = ConfigStore.instance()
    for path in sorted(RECIPES_DIR.glob("*.yaml")):
        store.store(group="recipe", name=path.stem, node=OmegaConf.load(path), package="_global_")


register_recipes()


def recipe_names(extra_dirs: tuple[Path, ...] = ()) -> list[str]:
    """Our recipes plus those in ``extra_dirs`` (the ``recipe/`` folders of a user's ``hydra.searchpath``)."""
    return sorted({p.stem for folder in (RECIPES_DIR, *extra_dirs) for p in folder.glob("*.yaml")})


def user_recipe_dirs(overrides: list[str]) -> tuple[Path, ...]:
    """``<folder>/recipe`` for every ``file://`` or ``pkg://`` entry of the user's ``hydra.searchpath``."""
    folders = []
    for override in (o for o in overrides if o.lstrip("+").startswith("hydra.searchpath=")):
        try:
            value = OverridesParser.create().parse_override(override).value()
        except HydraException:  # OverrideParseException, or the lexer's own for a character it does not know
            raise UserError(
                f"cannot parse {override} (Hydra's override grammar): quote each folder that holds a space or"
                ' a non-ASCII letter, e.g. hydra.searchpath=["file:///abs/my conf"]'
            ) from None
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
            else:  # file:// or a plain path; Hydra passes over a folder that is not there without a word
                if not Path(where).expanduser().is_dir():
                    raise UserError(
                        f"hydra.searchpath names {entry}, but {where} is no folder: give the folder that holds"
                        " recipe/<name>.yaml, as an absolute path, e.g. hydra.searchpath=[file:///abs/my-conf]"
                    )
                folders.append(Path(where) / "recipe")
    return tuple(folders)


def check_recipe_names(overrides: list[str]) -> None:
    """A ``recipe=NAME`` that names no recipe: one line with the one it most likely means (Hydra's own error
    lists every option, without a guess)."""
    known = recipe_names(user_recipe_dirs(overrides))
    for override in overrides:
        match = re.fullmatch(r"\+?recipe=(.*)", override)
        if match and match.group(1) not in known:
            raise UserError(
                f"{unknown_recipe(match.group(1), known)}"
                " (`make recipes` lists them with their published results; a folder of your own recipes:"
                " hydra.searchpath=[file:///abs/conf] with conf/recipe/NAME.yaml)"
            )
        # a user's recipe file: Hydra's YAML error is a traceback, and without its package line Hydra's error
        # names a key 'recipe' the file never wrote
        for folder in user_recipe_dirs(overrides) if match else ():
            path = folder / f"{match.group(1)}.yaml"
            if not path.is_file():
                continue
            with open(path, encoding="utf-8") as file:
                try:
                    yaml.safe_load(file)
                except yaml.MarkedYAMLError as err:
                    raise UserError(yaml_error_line(err)) from None
            if not re.search(r"^# *@package +_global_ *$", path.read_text(encoding="utf-8"), re.MULTILINE):
                raise UserError(
                    f"{path}: start the file with the line # @package _global_, as every recipe does (without it"
                    " Hydra puts the recipe's keys under 'recipe')"
                )


def yaml_error_line(err: yaml.MarkedYAMLError) -> str:
    """``<file>:<line>:<column>: <yaml's message>`` (1-based, as editors count), with where the construct
    yaml was reading began when yaml names it."""
    mark = err.problem_mark or err.context_mark
    where = f"{mark.name}:{mark.line + 1}:{mark.column + 1}: " if mark is not None else ""
    context = ""
    if err.context and err.problem:
        started = err.context_mark
        at = f" at line {started.line + 1}, column {started.column + 1}" if started is not None else ""
        context = f" ({err.context}{at})"
    return f"{where}{err.problem or err.context}{context}"


def unknown_recipe(name: str, known: list[str], ours: str = "recipe={}") -> UserError:
    """The one-line error for recipe ``name``, not among ``known``: the likely one first (written as ``ours``
    formats it: ``recipe=NAME`` on the command line, the bare name for the recipe card), then all of them. The
    likely one: the same name once a ``recipes/`` folder, a ``.yaml`` suffix, capitals and dashes are set aside
    (``recipes/Goyal-8k.yaml`` -> ``goyal_8k``), else the closest by difflib's ratio (at least 0.6, as for a
    mistyped key)."""
    plain = re.sub(r"\.ya?ml$", "", Path(name).name).lower().replace("-", "_")
    nearest = [plain] if plain in known else difflib.get_close_matches(plain, known, n=1, cutoff=0.6)
    guess = f"did you mean {ours.format(nearest[0])}? " if nearest else ""
    return UserError(f"unknown recipe '{name}'; {guess}known recipes: {', '.join(known)}")
