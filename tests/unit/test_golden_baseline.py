"""The golden baseline in every `make test`: each recipe composes to the config saved in tests/golden/configs
(what ``--cfg job`` prints), and the demo's first 20 losses are the saved ones to the printed 4 decimals. A
refactor that changes either fails here; an intended change re-saves with ``python tests/golden/baseline.py
save`` and says why in its commit."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "golden"))

import baseline  # noqa: E402


def test_every_recipe_composes_to_its_saved_config():
    names = baseline.recipe_names()
    assert len(names) == len(list((ROOT / "recipes").glob("*.yaml")))  # a new recipe is saved too
    assert baseline.config_differences(names) == []


@pytest.mark.slow
@pytest.mark.demo  # make test runs it (about a minute)
def test_the_demos_first_losses_are_the_saved_ones(tmp_path, monkeypatch):
    made = subprocess.run(
        [sys.executable, "-m", "lightning_lars.data.demo", "--out", str(tmp_path / "demo"), "--workers", "2"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert made.returncode == 0, made.stderr[-2000:]
    monkeypatch.setenv("LARS_DATA_DIR", str(tmp_path))
    saved = [tuple(line.split()) for line in baseline.LOSSES.read_text().splitlines()]
    now = [(str(step), loss) for step, loss in baseline.demo_losses(tmp_path / "logs")]
    assert len(saved) == baseline.NUM_LOSSES and now == saved
