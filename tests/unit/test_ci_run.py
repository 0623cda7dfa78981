"""`.ci/run`, the CI script, as bash runs it: the order of its parts, the background installs, the exit status.

Real parts: the script itself, bash, setsid/nice, process groups and their killing. Stand-in: `make` on PATH
(the real targets download gigabytes), which records each target with its start and end, its niceness and
whether pip's cache is off, sleeps where the real target takes long, and fails where a test asks it to.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FAKE_MAKE = """#!/bin/bash
target=${@: -1}
echo "start $target nice=$(nice) no_cache=${PIP_NO_CACHE_DIR:-0}" >> "$CALLS"
if [ "$target" = oldest-venv ]; then echo "downloading torch 2.11"; fi
sleep "$(printenv "SLEEP_${target//-/_}" || echo 0)" & echo $! > "$CALLS.$target.pid"; wait
echo "end $target" >> "$CALLS"
exit "$(printenv "EXIT_${target//-/_}" || echo 0)"
"""


def run_ci(tmp_path: Path, **settings: str) -> tuple[subprocess.CompletedProcess, list[str]]:
    clone = tmp_path / "clone"
    (clone / ".ci").mkdir(parents=True)
    shutil.copy2(ROOT / ".ci" / "run", clone / ".ci" / "run")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "make").write_text(FAKE_MAKE)
    (bin_dir / "make").chmod(0o755)
    calls = tmp_path / "calls"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_NO_CACHE")}
    env = {**env, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "CALLS": str(calls), **settings}
    done = subprocess.run(
        [str(clone / ".ci" / "run")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return done, calls.read_text().splitlines()


def test_background_installs_overlap_the_tests_and_every_part_runs(tmp_path):
    done, calls = run_ci(tmp_path, SLEEP_oldest_venv="4", SLEEP_install="1")
    assert done.returncode == 0, done.stdout + done.stderr
    order = [line.split()[0] + " " + line.split()[1] for line in calls]
    # apt-get first, alone; the oldest set starts before the install, the offline image once .venv exists
    assert order[:4] == ["start system-deps", "end system-deps", "start slurm-deps", "end slurm-deps"]
    assert order.index("start oldest-venv") < order.index("end install")
    assert order.index("end install") < order.index("start offline-image")  # it reads .venv
    assert order.index("start test-slow") < order.index("end oldest-venv")  # downloads while the tests run
    assert order.index("end oldest-venv") < order.index("start test-oldest")
    assert order.index("end offline-image") < order.index("start test-offline")
    assert order[-2:] == ["start test-offline", "end test-offline"]
    ours = os.nice(0)  # the background runs 10 steps nicer than CI itself, the tests as nice as CI
    for line in (line for line in calls if line.startswith("start")):
        background = line.startswith(("start oldest-venv", "start offline-image"))
        expected = f"nice={min(ours + 10, 19)} no_cache=1" if background else f"nice={ours} no_cache=0"
        assert line.endswith(expected), line
    timed = re.findall(r"^\[ci\] ([\w -]+(?: \(background\))?): (\d+) s", done.stdout, flags=re.MULTILINE)
    parts = [name for name, _ in timed if name != "total"]
    assert parts == [
        "system-deps",
        "slurm-deps",
        "install",
        "lint",
        "test",
        "test-slow",
        "oldest_venv (background)",
        "test-oldest",
        "offline_image (background)",
        "test-offline",
    ]
    assert int(dict(timed)["oldest_venv (background)"]) >= 1
    assert re.search(r"^\[ci\] total: \d+ s, exit 0$", done.stdout, flags=re.MULTILINE), done.stdout


def test_a_failed_background_install_fails_ci_with_its_status_and_log(tmp_path):
    done, calls = run_ci(tmp_path, EXIT_oldest_venv="3")
    assert done.returncode == 3
    assert (
        "[ci] oldest_venv failed (exit 3); its log:" in done.stdout
        and "downloading torch 2.11" in done.stdout
    )
    started = [line.split()[1] for line in calls if line.startswith("start")]
    assert "test-slow" in started and "test-oldest" not in started  # collected after the tests, then stop
    assert "[ci] oldest_venv (background): FAILED, exit 3" in done.stdout


def test_a_failed_test_part_stops_the_background_installs(tmp_path):
    started = time.monotonic()
    done, calls = run_ci(tmp_path, EXIT_test_slow="2", SLEEP_oldest_venv="30", SLEEP_offline_image="30")
    assert done.returncode == 2 and time.monotonic() - started < 20  # no waiting for the background
    assert "[ci] test-slow: FAILED (exit 2)" in done.stdout and not any(
        "test-oldest" in line for line in calls
    )
    # Every process the background parts started carries CALLS in its environment. Under load a nice-10 part
    # may be killed before it even wrote its sleeper's pid, so the check looks for any of them, not for one pid.
    marker = f"CALLS={tmp_path / 'calls'}".encode()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and _processes_with(marker):
        time.sleep(0.05)
    assert not _processes_with(marker), "the background installs' work still runs"


def _processes_with(marker: bytes) -> list[int]:
    """The pids of the processes whose environment holds ``marker`` (``NAME=value``)."""
    found = []
    for environ in Path("/proc").glob("[0-9]*/environ"):
        try:
            if marker in environ.read_bytes().split(b"\0"):
                found.append(int(environ.parent.name))
        except OSError:  # gone meanwhile, or not ours to read
            continue
    return found


@pytest.mark.parametrize("target", ["oldest-venv", "offline-image", "test-oldest", "test-offline"])
def test_the_makefile_has_the_targets_ci_calls(target):
    listed = subprocess.run(
        ["make", "-n", target, "PY=true", "-o", ".venv/.installed", "-o", "system-deps"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert listed.returncode == 0, listed.stderr
