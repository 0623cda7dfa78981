"""A new user's first-day mistakes, made as the user made them (``python -m lightning_lars.train ...``,
``lightning-lars --help``, ``make ...``): each is one ``error:`` line with the fix that fits what was given, before
a run folder or a logger exists."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers import assert_one_line_error
from PIL import Image

ROOT = Path(__file__).resolve().parents[2]


def entry_point(*args: str, tmp: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    environment = {**os.environ, "WANDB_MODE": "offline", "PYTHONPATH": str(ROOT), **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "lightning_lars.train", *args],
        cwd=tmp,
        env=environment,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def image_folder(root: Path, per_class: int, classes: int = 2) -> Path:
    """``root/{train,val}/<class>/<n>.jpg``: ``per_class`` real 32 px JPEGs per class in each split."""
    rng = np.random.default_rng(0)
    for split in ("train", "val"):
        for c in range(classes):
            folder = root / split / f"class{c}"
            folder.mkdir(parents=True)
            for n in range(per_class):
                pixels = rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)
                Image.fromarray(pixels).save(folder / f"{n}.jpg")
    return root


@pytest.mark.parametrize(
    "given, advised",
    [
        # debug=toy already given: its batch plan (ghost BN over 16 images) makes 16 the largest that fits
        (["debug=toy"], "set batch.global_size=16"),
        (["trainer.max_steps=1"], "set batch.global_size=24"),  # the demo's BN over each device's batch
    ],
)
def test_data_smaller_than_one_batch_is_refused_before_any_folder_or_logger(given, advised, tmp_path):
    root = image_folder(tmp_path / "tiny", per_class=12)  # 24 train images
    logs = tmp_path / "logs"
    done = entry_point(
        "recipe=demo",
        *given,
        "data=imagefolder",
        f"data.root={root}",
        "data.num_classes=2",
        f"paths.log_dir={logs}",
        tmp=tmp_path,
    )
    line = assert_one_line_error(done, "the data has 24 training images", "global batch of", advised)
    assert (
        "debug=toy" not in line
    )  # no advice to add what was given, nor to swap the user's data for the demo's
    assert not logs.exists()  # no run folder, so no W&B folder either
    assert "W&B" not in done.stdout + done.stderr
