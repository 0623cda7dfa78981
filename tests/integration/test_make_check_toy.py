"""`make check ... debug=toy` tries the pipeline: it writes nothing to the checkout's tracked files."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
TRACKED_TABLE = (ROOT / "recipes" / "runs.jsonl", ROOT / "recipes" / "README.md")


def status() -> tuple[str, list[bytes | None]]:
    porcelain = subprocess.run(
        ["git", "status", "--porcelain"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    return porcelain, [path.read_bytes() if path.exists() else None for path in TRACKED_TABLE]


def test_make_check_at_toy_scale_leaves_the_tracked_files_alone(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "WANDB_MODE": "offline"}
    data = tmp_path / "data"
    made = subprocess.run(
        [sys.executable, "-m", "lightning_lars.data.demo", "--out", str(data / "demo")]
        + ["--train-per-class", "16", "--val-per-class", "8", "--workers", "1"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert made.returncode == 0, made.stderr[-2000:]
    before = status()
    checked = subprocess.run(
        ["make", "--no-print-directory", "-o", ".venv/.installed", f"PY={sys.executable}", "check"]
        + ["recipe=demo", "seeds=1", "debug=toy", f"paths.data_dir={data}"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    where = re.search(r"\[check\] row added to (\S+)", checked.stdout)
    try:
        assert checked.returncode == 0, (checked.stdout + checked.stderr)[-3000:]
        assert status() == before
        assert where and Path(where.group(1)).is_file(), checked.stdout[
            -2000:
        ]  # the row, in the check's folder
    finally:
        if where and Path(where.group(1)).parent.is_relative_to(ROOT / "logs"):
            shutil.rmtree(Path(where.group(1)).parent)
