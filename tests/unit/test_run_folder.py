"""A run folder's lock, asked of by another real process: held while its holder lives, free once it dies; and
what a refused run takes back."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from lightning_lars.config.paths import fresh_folder
from lightning_lars.core.errors import UserError
from lightning_lars.runtime import run_folder

HOLDER = """import sys, time
from lightning_lars.runtime import run_folder
run_folder.hold(sys.argv[1])
print("held", flush=True)
time.sleep(600)
"""


def test_a_live_process_holds_its_folder_and_its_death_frees_it(tmp_path, monkeypatch):
    for name in run_folder.RANK_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(tmp_path)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        assert run_folder.live_holder(tmp_path) == f"pid {holder.pid} on {os.uname().nodename}"
        with pytest.raises(
            UserError, match=f"run folder {tmp_path} is in use by a live run \\(pid {holder.pid}"
        ):
            run_folder.hold(tmp_path)
    finally:
        holder.kill()
        holder.wait()
    assert run_folder.live_holder(tmp_path) is None  # the kernel dropped the dead holder's lock
    with run_folder.holding(tmp_path):
        assert "this process" in run_folder.live_holder(tmp_path)
    assert run_folder.live_holder(tmp_path) is None


# The run forks a worker (a DataLoader's) and waits to be killed; the worker lives on. The worker prints its own
# pid, so the test reads it only once the worker runs (past the fork handlers), as a DataLoader's workers do long
# before any kill: the parent printing the pid let a loaded machine's test look before the child ever ran.
HOLDER_WITH_WORKER = """import os, sys, time
from lightning_lars.runtime import run_folder
run_folder.hold(sys.argv[1])
if os.fork() == 0:
    print(os.getpid(), flush=True)
    time.sleep(600)
    os._exit(0)
time.sleep(600)
"""


def test_a_killed_runs_folder_is_free_while_its_forked_worker_still_lives(tmp_path, monkeypatch):
    """A DataLoader worker notices its parent's death only at its next check, seconds later: it must not
    keep the folder locked, or the resume right after the kill is refused as a live run."""
    for name in run_folder.RANK_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER_WITH_WORKER, str(tmp_path)], stdout=subprocess.PIPE, text=True
    )
    worker = int(holder.stdout.readline())
    try:
        assert run_folder.live_holder(tmp_path) == f"pid {holder.pid} on {os.uname().nodename}"
        holder.kill()
        holder.wait()
        os.kill(worker, 0)  # the worker still lives
        assert run_folder.live_holder(tmp_path) is None
    finally:
        os.kill(worker, 9)


def test_only_global_rank_zero_holds_the_lock(tmp_path, monkeypatch):
    monkeypatch.setenv("LOCAL_RANK", "1")  # a DDP rank shares rank 0's folder
    with run_folder.holding(tmp_path):
        assert run_folder.live_holder(tmp_path) is None


def test_a_refused_sweep_job_leaves_the_sweep_folder_while_another_jobs_record_is_in_it(tmp_path):
    """The sweep folder (made here, as ${fresh_folder:} makes it) keeps job 0's trained record: only the refused
    job's folder goes. With job 0's folder gone too, nothing but Hydra's multirun.yaml is left, and it goes."""
    sweep = Path(fresh_folder(str(tmp_path / "logs" / "demo" / "multiruns" / "now")))
    (sweep / run_folder.SWEEP_RECORD).write_text("hydra: {}\n")
    for job in ("0", "1"):
        (sweep / job / ".hydra").mkdir(parents=True)
        (sweep / job / "train.log").write_text("")
    (sweep / "0" / "checkpoints").mkdir()  # job 0 trained

    assert run_folder.discard_refused(sweep / "1")
    assert sorted(p.name for p in sweep.iterdir()) == ["0", run_folder.SWEEP_RECORD]
    assert not run_folder.discard_refused(sweep / "0")  # a record of training is never discarded

    shutil.rmtree(sweep / "0" / "checkpoints")
    assert run_folder.discard_refused(sweep / "0")
    assert not (tmp_path / "logs").exists()  # the sweep folder and the parents made with it
