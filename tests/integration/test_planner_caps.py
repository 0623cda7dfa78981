"""The grouped hook's shipped caps are the ones the planner proposes for the example its config names."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


def test_ddp_bucketed_ships_the_caps_the_planner_proposes_for_its_example():
    config = (ROOT / "conf" / "strategy" / "ddp_bucketed.yaml").read_text()
    command = re.search(r"`python -m (lightning_lars\.parallel\.planner [^`]*)`", config).group(1).split()
    done = subprocess.run(
        [sys.executable, "-m", *command], cwd=ROOT, capture_output=True, text=True, timeout=600, check=False
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    header = next(line for line in done.stdout.splitlines() if line.startswith("| GPUs"))
    row = next(line for line in done.stdout.splitlines() if line.startswith("| 2048 "))
    columns = [cell.strip() for cell in header.strip("|").split("|")]
    cell = [cell.strip() for cell in row.strip("|").split("|")][columns.index("grouped hook")]
    proposed = yaml.safe_load(cell.partition(" ")[2])  # "0.24 [4, 16]"
    shipped = yaml.safe_load(config)["ddp_comm_state"]["group_caps_mb"]
    assert shipped == proposed, (shipped, row)
