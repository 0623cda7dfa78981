"""benchmarks/bench_largebatch.py end to end on a small generated data set: two arms train, each run is a line of
the runs file, the README section and the plot are written from it, and a second call trains nothing."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from lightning_lars.data.demo import prepare_demo
from lightning_lars.report import runs_table
from lightning_lars.report.bench_key import data_hash

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_two_arms_run_are_recorded_rendered_and_kept(tmp_path):
    data = tmp_path / "shapes"
    prepare_demo(data, num_classes=4, train_per_class=100, val_per_class=10, num_workers=1, progress=False)
    readme = tmp_path / "README.md"
    readme.write_text(f"# x\n{runs_table.BEGIN}\n{runs_table.END}\ntail\n")
    runs = tmp_path / "runs.jsonl"
    command = [
        sys.executable, str(ROOT / "benchmarks" / "bench_largebatch.py"), "--data", str(data), "--ratio", "0.25",
        "--seeds", "1", "--epochs", "2", "--resolution", "16", "--only", "sgd_small", "lamb", "--runs", str(runs),
        "--readme", str(readme), "--plot", str(tmp_path / "runs.png"),
    ]  # fmt: skip
    first = subprocess.run(command, capture_output=True, text=True, timeout=900, cwd=tmp_path)
    assert first.returncode == 0, first.stderr[-2000:]
    assert "head adapted to the data set's 4 classes (the recipe has 1000)" in first.stdout
    rows = [json.loads(line) for line in runs.read_text().splitlines()]
    assert [(r["arm"], r["batch"], r["seed"]) for r in rows] == [("sgd_small", 64, 0), ("lamb", 100, 0)]
    for row in rows:
        assert len(row["top1_per_epoch"]) == 2 and row["dataset"]["train"] == 400 and row["wall_s"] > 0
        assert "data.train_path=DATA/train.beton" in row["overrides"] and row["commit"]
        assert row["dataset"]["sha256"] == data_hash(data) and row["factors"]["width"] == "quarter"
    assert str(tmp_path) not in runs.read_text()  # no folder of this machine in the rows
    text = readme.read_text()
    assert "| lamb (lamb_32k) |" in text and text.endswith(f"{runs_table.END}\ntail\n")
    assert (tmp_path / "runs.png").read_bytes()[:4] == b"\x89PNG"

    again = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert again.returncode == 0, again.stderr[-2000:]
    assert "lamb seed 0: kept" in again.stdout and len(runs.read_text().splitlines()) == 2
