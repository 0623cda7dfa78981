"""A .beton damaged in place (same size: a bad block, a torn copy) is refused before it trains, by the user's own
commands: a training run's start, `make verify`, and `make demo-data`, which writes it again. A manifest from
before checksums warns in one line and `make verify args=--record` adds them."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest
from helpers import MAKE, run

pytestmark = pytest.mark.slow


def error_line(done: subprocess.CompletedProcess, *phrases: str) -> str:
    """``done`` (a make command) exited with status 2, no traceback, and ONE ``error: ...`` line holding every
    phrase (make adds only its own ``make: *** ... Error 2`` line after it); returns that line."""
    assert done.returncode == 2 and "Traceback" not in done.stdout + done.stderr, done.stderr[-3000:]
    (line,) = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert all(phrase in line for phrase in phrases), line
    return line


def damaged_copy(data_dir, tmp_path):
    """A copy of the demo data whose train.beton has 1 MiB overwritten with random bytes at 1 MiB, as
    `dd ... conv=notrunc` does it: the file keeps its size and header."""
    copy = tmp_path / "copy"
    shutil.copytree(data_dir / "demo", copy / "demo")
    beton = copy / "demo" / "train.beton"
    size = beton.stat().st_size
    assert size > 2 << 20  # the damage lies inside the file
    damage = ["dd", "if=/dev/urandom", f"of={beton}", "bs=1M", "seek=1", "count=1", "conv=notrunc"]
    subprocess.run(damage, check=True, capture_output=True)
    assert beton.stat().st_size == size
    return copy, beton


def test_a_damaged_beton_is_refused_at_the_start_by_verify_and_rebuilt_by_its_command(data_dir, tmp_path):
    copy, beton = damaged_copy(data_dir, tmp_path)
    logs = tmp_path / "logs"
    train = ["recipe=demo", "debug=toy", "data=demo", f"paths.data_dir={copy}", "trainer.max_steps=40"]
    done = run([*MAKE, *train, f"paths.log_dir={logs}"])
    rebuild = f"make demo-data out={copy / 'demo'}"
    line = error_line(done, f"dataset file {beton} is damaged", rebuild)
    assert not logs.exists()  # refused before Hydra made a run folder: nothing trained, nothing written

    verified = run([*MAKE, "verify", f"dir={copy / 'demo'}"])
    assert error_line(verified) == line

    sizes = ["--train-per-class", "16", "--val-per-class", "8", "--workers", "1"]
    made = run([sys.executable, "-m", "lightning_lars.data.demo", "--out", copy / "demo", *sizes])
    assert made.returncode == 0 and "damaged" in made.stderr, made.stderr[-2000:]
    again = run([*MAKE, "verify", f"dir={copy / 'demo'}"])
    assert again.returncode == 0 and again.stdout.count("intact") == 2, again.stdout + again.stderr


def test_an_older_manifest_warns_and_verify_records_its_checksums(data_dir, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(data_dir / "demo", copy / "demo")
    manifest_path = copy / "demo" / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    assert set(manifest["checksums"]["files"]) == {"train.beton", "val.beton"}  # written by make demo-data
    del manifest["checksums"]
    manifest_path.write_text(json.dumps(manifest))

    train = [
        "recipe=demo",
        "debug=toy",
        "data=demo",
        f"paths.data_dir={copy}",
        "trainer.max_steps=1",
    ]
    done = run([*MAKE, *train, f"paths.log_dir={tmp_path / 'logs'}"])
    assert done.returncode == 0, done.stderr[-2000:]
    warnings = [line for line in done.stderr.splitlines() if "records no checksums" in line]
    assert len(warnings) == 1 and f"make verify dir={copy / 'demo'} args=--record" in warnings[0]

    recorded = run([*MAKE, "verify", f"dir={copy / 'demo'}", "args=--record"])
    assert recorded.returncode == 0 and "recorded the checksums of train.beton, val.beton" in recorded.stdout
    damaged = ["dd", "if=/dev/urandom", f"of={copy / 'demo' / 'val.beton'}", "bs=4k", "seek=300", "count=1"]
    subprocess.run([*damaged, "conv=notrunc"], check=True, capture_output=True)
    verified = run([*MAKE, "verify", f"dir={copy / 'demo'}"])
    error_line(verified, f"dataset file {copy / 'demo' / 'val.beton'} is damaged")
