"""`make recipes` marks a recipe that is another under a second name, and only such a recipe."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from omegaconf import OmegaConf

from tests.unit.recipe_helpers import RECIPES, recipe

ROOT = Path(__file__).resolve().parents[2]


def test_make_recipes_marks_each_alias_with_the_recipe_it_renames():
    done = subprocess.run(
        ["make", "--no-print-directory", "-o", ".venv/.installed", f"PY={sys.executable}", "recipes"],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
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
