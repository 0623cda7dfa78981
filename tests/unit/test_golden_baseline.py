"""The golden baseline in every `make test`: each recipe composes to the config saved in tests/golden/configs
(what ``--cfg job`` prints), and the demo's first 20 losses are the saved ones within the spread measured between
CPU kernel sets (tests/golden/baseline.py: `MARGIN` times the file's third column). A refactor that changes
either fails here; an intended change re-saves with ``python tests/golden/baseline.py save`` and says why in its
commit. Two real changes, a 1 % higher LR and two steps' images swapped, are run to show that the tolerance
still sees them (in ``make test-slow``: two more demo runs)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "golden"))

import baseline  # noqa: E402

DEMO = yaml.safe_load((ROOT / "recipes" / "demo.yaml").read_text())


def test_every_recipe_composes_to_its_saved_config():
    names = baseline.recipe_names()
    assert len(names) == len(list((ROOT / "recipes").glob("*.yaml")))  # a new recipe is saved too
    assert baseline.config_differences(names) == []


@pytest.fixture(scope="module")
def demo_data(tmp_path_factory) -> Path:
    """The full demo data set (``make demo-data``'s command), as ``$LARS_DATA_DIR``."""
    data_dir = tmp_path_factory.mktemp("golden")
    made = subprocess.run(
        [sys.executable, "-m", "lightning_lars.data.demo", "--out", str(data_dir / "demo"), "--workers", "2"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert made.returncode == 0, made.stderr[-2000:]
    return data_dir


def demo_losses(demo_data: Path, tmp_path: Path, *overrides: str) -> list[tuple[int, float]]:
    return baseline.demo_losses(tmp_path / "logs", overrides, LARS_DATA_DIR=str(demo_data))


@pytest.mark.slow
@pytest.mark.demo  # make test runs it (about a minute)
def test_the_demos_first_losses_are_the_saved_ones(demo_data, tmp_path):
    now = demo_losses(demo_data, tmp_path)
    assert len(now) == baseline.NUM_LOSSES and baseline.loss_differences(now) == []


@pytest.mark.slow
def test_a_one_percent_higher_lr_moves_the_losses_beyond_the_tolerance(demo_data, tmp_path):
    lr = DEMO["scheduler"]["base_lr"]
    moves = baseline.loss_moves(demo_losses(demo_data, tmp_path, f"scheduler.base_lr={lr * 1.01!r}"))
    assert max(moves) > 1, moves  # measured 2026-11-28: steps 3-6 beyond, step 5 by 14x (140x the spread)


@pytest.mark.slow
def test_two_steps_images_swapped_move_the_losses_beyond_the_tolerance(demo_data, tmp_path):
    swap = ["+callbacks.swap._target_=probes.SwapTwoSteps", "+callbacks.swap.step=5"]
    moves = baseline.loss_moves(
        demo_losses(demo_data, tmp_path, *swap, f"+callbacks.swap.batch={DEMO['batch']['global_size']}")
    )
    assert max(moves[:4]) <= 1 < moves[4], moves  # the same up to step 4; step 5 trains other images
