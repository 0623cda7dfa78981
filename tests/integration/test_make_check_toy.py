"""`make check ... debug=toy` tries the pipeline: it writes nothing to the checkout's tracked files."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from helpers import MAKE, ROOT, run

pytestmark = pytest.mark.slow

TRACKED_TABLE = (ROOT / "recipes" / "runs.jsonl", ROOT / "recipes" / "README.md")


def status() -> tuple[str, list[bytes | None]]:
    porcelain = subprocess.run(
        ["git", "status", "--porcelain"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    return porcelain, [path.read_bytes() if path.exists() else None for path in TRACKED_TABLE]


def test_make_check_at_toy_scale_leaves_the_tracked_files_alone(data_dir):
    before = status()
    checked = run([*MAKE, "check", "recipe=demo", "seeds=1", "debug=toy", f"paths.data_dir={data_dir}"])
    where = re.search(r"\[check\] row added to (\S+)", checked.stdout)
    try:
        assert checked.returncode == 0, (checked.stdout + checked.stderr)[-3000:]
        assert status() == before
        # the row, in the check's folder
        assert where and Path(where.group(1)).is_file(), checked.stdout[-2000:]
    finally:
        if where and Path(where.group(1)).parent.is_relative_to(ROOT / "logs"):
            shutil.rmtree(Path(where.group(1)).parent)
