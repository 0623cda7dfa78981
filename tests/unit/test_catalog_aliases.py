"""`make recipes` marks a recipe that is another under a second name, and only such a recipe."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

from omegaconf import OmegaConf

from tests.unit.recipe_helpers import RECIPES, recipe

ROOT = Path(__file__).resolve().parents[2]


MAKE = ["make", "--no-print-directory", "-o", ".venv/.installed", f"PY={sys.executable}"]


def make(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*MAKE, *args],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_make_recipes_marks_each_alias_with_the_recipe_it_renames():
    done = make("recipes")
    assert done.returncode == 0, done.stderr[-3000:]
    marked = dict(re.findall(r"^(\w+) = (\w+) ", done.stdout, flags=re.MULTILINE))
    assert marked == {"resnet50_32k": "you_resnet50_32k"}, done.stdout
    for alias, target in marked.items():  # the oracle: Hydra composes both to the same run
        composed = [OmegaConf.to_container(recipe(name)) for name in (alias, target)]
        for config in composed:
            config.pop("recipe_name")
        assert composed[0] == composed[1]
    table = done.stdout.split("\n\n")[0].splitlines()[1:]
    assert {line.split()[0] for line in table} == {*RECIPES, "demo"}  # every recipe, marked or not


def test_make_recipes_ends_with_commands_that_run_in_a_clone():
    """The closing lines name make's targets (they create the venv), and the card's command runs as written."""
    done = make("recipes")
    assert done.returncode == 0, done.stderr[-3000:]
    last = done.stdout.rstrip().splitlines()[-1]
    assert last.startswith("its card: make recipe-card recipe=NAME") and "python -m" not in done.stdout, last
    card = make(*shlex.split(last.removeprefix("its card: ").split(" [")[0].replace("NAME", "demo"))[1:])
    assert card.returncode == 0 and "plan: " in card.stdout, card.stderr[-3000:]
