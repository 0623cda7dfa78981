"""SLURM as it behaves. The sbatch text asks for each task's share of the node, all its memory and
an appending log (the loader's thread count under srun: tests/integration/test_slurm_affinity.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import MAKE, assert_one_line_error, run

ROOT = Path(__file__).resolve().parents[2]
CORES = len(os.sched_getaffinity(0))


def dry_run(*args: str) -> str:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "lightning_lars.parallel.launch",
            "--launcher",
            "slurm",
            "--dry-run",
            *args,
            "recipe=demo",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, "PATH": "/usr/bin:/bin"},
    )  # --cpus-per-node is given and --dry-run submits nothing: neither sinfo nor sbatch is asked
    assert result.returncode == 0, result.stderr
    return result.stdout


def directives(script: str) -> list[str]:
    return [line.split(None, 1)[1] for line in script.splitlines() if line.startswith("#SBATCH ")]


@pytest.mark.parametrize(
    "cpus_per_node, devices, mem, want_cpus", [(64, 8, None, 8), (96, 4, "480G", 24), (6, 4, None, 1)]
)
def test_sbatch_asks_for_cores_per_gpu_all_memory_and_appends_to_its_log(
    cpus_per_node, devices, mem, want_cpus
):
    script = dry_run(
        "--nodes",
        "2",
        "--devices",
        str(devices),
        "--cpus-per-node",
        str(cpus_per_node),
        *(["--mem", mem] if mem else []),
    )
    asked = directives(script)
    assert f"--cpus-per-task={want_cpus}" in asked
    assert f"--mem={mem or 0}" in asked
    assert "--open-mode=append" in asked and "--requeue" in asked and "--signal=SIGUSR1@90" in asked
    # srun (Slurm >= 22.05) does not inherit --cpus-per-task from sbatch: the script must hand it on
    lines = script.splitlines()
    export = lines.index('export SRUN_CPUS_PER_TASK="${SLURM_CPUS_PER_TASK}"')
    assert export < next(i for i, line in enumerate(lines) if line.startswith("srun "))


def test_sbatch_without_sinfo_or_cpus_per_node_is_one_line_naming_the_option(tmp_path):
    """The submitting machine's cores are never taken for a compute node's (a login node has few)."""
    # an empty PATH: CI installs SLURM into /usr/bin, so /usr/bin may hold a sinfo
    no_slurm = tmp_path / "bin"
    no_slurm.mkdir()
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "lightning_lars.parallel.launch",
            "--launcher",
            "slurm",
            "--dry-run",
            "--devices",
            "2",
            "recipe=demo",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, "PATH": str(no_slurm)},
    )
    assert_one_line_error(result, "sinfo is not on PATH", "--cpus-per-node N")
    assert "#SBATCH" not in result.stdout


def test_a_failing_sinfo_is_named_with_its_own_last_line_not_as_missing(tmp_path):
    """A login node with a broken SLURM config: sinfo is there but fails. ``make recipe=... nodes=2`` with sbatch on
    PATH submits through SLURM and asks sinfo for a node's cores first: the error says sinfo failed and why."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, body in (
        (
            "sinfo",
            'echo "sinfo: error: resolve_ctls_from_dns_srv: res_nsearch error" >&2\n'
            'echo "sinfo: error: fetch_config: DNS SRV lookup failed" >&2\nexit 1',
        ),
        ("sbatch", 'echo "sbatch must not run: sinfo failed" >&2\nexit 3'),
    ):
        (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / name).chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "PYTHONPATH": str(ROOT)}
    done = run([*MAKE, "recipe=demo", "nodes=2", "devices=1"], env=env, timeout=120)
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert (
        "`sinfo --noheader --format=%c` failed (exit 1): sinfo: error: fetch_config: DNS SRV lookup failed"
        in (errors[0])
    )
    assert "not on PATH" not in errors[0] and "--cpus-per-node N" in errors[0]
    assert "sbatch must not run" not in done.stderr
    assert "make ... args='--launcher local'" in errors[0]  # the way to train here: it skips sinfo and sbatch
    here = run([*MAKE, "recipe=demo", "devices=2", "args=--launcher local --dry-run"], env=env, timeout=120)
    assert here.returncode == 0, here.stderr[-2000:]
    assert "[launch] local:" in here.stdout and "lightning_lars.train recipe=demo" in here.stdout
    assert "trainer.devices=2" in here.stdout
