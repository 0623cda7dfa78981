"""The first day on a cluster, through the real entry point: a sweep under Hydra's basic launcher runs every job
in its own folder; two runs started together never share a folder; ``run.ckpt_path=last`` never resumes a run
that a live process still trains, and says a finished run finished instead of training it again."""

from __future__ import annotations

import json
import signal
import subprocess
import time

import pytest
from helpers import ROOT, TRAIN, assert_one_line_error, entry_point_env, run

from lightning_lars.runtime.resume import WALL_KEY, load_meta

pytestmark = pytest.mark.slow


@pytest.fixture
def env(data_dir):
    """The demo data (160 train / 80 val images) as $LARS_DATA_DIR."""
    return entry_point_env(LARS_DATA_DIR=str(data_dir))


def command(*args: str) -> list[str]:
    return [*TRAIN, "recipe=demo", "debug=toy", *args]


def train(env, *args: str) -> subprocess.CompletedProcess:
    return run(command(*args), env=env, timeout=600)


def test_a_sweep_runs_both_jobs_each_in_its_own_folder(env, tmp_path):
    done = train(env, "-m", "seed=0,1", f"paths.log_dir={tmp_path}")
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    (sweep,) = (tmp_path / "demo" / "multiruns").iterdir()
    for job in (0, 1):
        folder = sweep / str(job)
        assert json.loads((folder / "results.json").read_text())["seed"] == job
        assert len(list((folder / "wandb").glob("offline-run-*"))) == 1  # its own W&B run, not job 0's again
        assert (folder / "checkpoints" / "last.ckpt").is_file()


def test_two_runs_started_together_get_a_folder_each(env, tmp_path):
    # both ask for the same folder name, as two runs started in the same second do
    same = f"hydra.run.dir=${{fresh_folder:{tmp_path}/demo/runs/same}}"
    runs = [
        subprocess.Popen(
            command(f"seed={seed}", f"paths.log_dir={tmp_path}", same),
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for seed in (0, 1)
    ]
    outputs = [run.communicate(timeout=600)[0] for run in runs]
    assert [run.returncode for run in runs] == [0, 0], outputs[0][-2000:] + outputs[1][-2000:]
    folders = sorted((tmp_path / "demo" / "runs").iterdir())
    assert [f.name for f in folders] == ["same", "same-2"]
    seeds = {json.loads((f / "results.json").read_text())["seed"] for f in folders}
    assert seeds == {0, 1}  # each run's results in a folder of its own, neither overwritten


def test_last_refuses_a_live_run_and_resumes_it_once_it_died(env, tmp_path):
    args = [
        f"paths.log_dir={tmp_path}",
        "trainer.max_steps=500",  # longer than the test: the run is alive while the others start
        "callbacks.checkpoint.every_n_train_steps=2",
    ]
    live = subprocess.Popen(
        command(*args), cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        deadline = time.monotonic() + 300
        while not list(tmp_path.glob("demo/runs/*/checkpoints/*.ckpt")) and time.monotonic() < deadline:
            assert live.poll() is None, "the long run ended early"
            time.sleep(0.2)
        (folder,) = (tmp_path / "demo" / "runs").iterdir()
        live.send_signal(signal.SIGSTOP)  # alive and holding its lock, without taking the CPU from the others
        refused = train(env, *args, "run.ckpt_path=last")
        assert_one_line_error(refused, str(folder), "still running", "leave out run.ckpt_path", alone=False)
        assert "Restoring states" not in refused.stdout + refused.stderr
        assert list((tmp_path / "demo" / "runs").iterdir()) == [folder]  # the refused run's folder is gone

        live.send_signal(signal.SIGKILL)  # the kernel drops a dead run's lock
        live.wait()
        resumed = subprocess.Popen(
            command(*args, "run.ckpt_path=last"),
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        restoring = next((line for line in resumed.stdout if "Restoring states" in line), "")
        resumed.kill()
        resumed.wait()
        assert str(folder / "checkpoints") in restoring
    finally:
        live.kill()
        live.wait()


def test_last_after_a_finished_run_says_so_and_does_not_train(env, tmp_path):
    args = [f"paths.log_dir={tmp_path}"]
    first = train(env, *args)
    assert first.returncode == 0, (first.stdout + first.stderr)[-3000:]
    (folder,) = (tmp_path / "demo" / "runs").iterdir()
    top1 = json.loads((folder / "results.json").read_text())["metrics"]["val/top1"]

    again = train(env, *args, "run.ckpt_path=last")
    output = again.stdout + again.stderr
    assert again.returncode == 0 and "Traceback" not in output, output[-3000:]
    (line,) = [ln for ln in again.stderr.splitlines() if "already finished" in ln]
    assert f"top-1 {100 * top1:.2f} %" in line and str(folder) in line
    assert "Restoring states" not in output and "Results: recipe" not in output  # nothing trained
    # nor a folder for the run it did not start
    assert list((tmp_path / "demo" / "runs").iterdir()) == [folder]


def test_a_finished_runs_folder_is_refused_unless_the_run_resumes_it_to_train_further(env, tmp_path):
    folder = tmp_path / "my-run"
    first = train(env, f"hydra.run.dir={folder}", "trainer.max_steps=2")
    assert first.returncode == 0, (first.stdout + first.stderr)[-3000:]
    kept = [
        "results.json",
        "resolved_config.yaml",
        ".hydra/config.yaml",
        "train.log",
        "checkpoints/last.ckpt",
    ]
    before = {name: (folder / name).read_bytes() for name in kept}
    first_attempt_s = load_meta(folder / "checkpoints" / "last.ckpt")[WALL_KEY]
    runs_of_wandb = sorted((folder / "wandb").glob("offline-run-*"))

    again = train(env, f"hydra.run.dir={folder}", "trainer.max_steps=2")
    assert_one_line_error(again, f"hydra.run.dir={folder} holds a finished run", "run.ckpt_path=last")
    assert {name: (folder / name).read_bytes() for name in kept} == before  # nothing of it replaced

    # resumed at its own length: nothing to train, and its results, checkpoints and W&B runs stay as they were
    same = train(env, f"hydra.run.dir={folder}", "trainer.max_steps=2", "run.ckpt_path=last")
    output = same.stdout + same.stderr
    assert same.returncode == 0 and "Traceback" not in output, output[-3000:]
    (line,) = [ln for ln in same.stderr.splitlines() if "nothing to train" in ln]
    assert "is at step 2 and this run ends at step 2" in line and "trainer.max_steps" in line
    assert "Restoring states" not in output and "Results: recipe" not in output
    for name in ("results.json", "resolved_config.yaml", "checkpoints/last.ckpt"):
        assert (folder / name).read_bytes() == before[name], name
    assert sorted((folder / "wandb").glob("offline-run-*")) == runs_of_wandb

    further = train(env, f"hydra.run.dir={folder}", "trainer.max_steps=4", "run.ckpt_path=last")
    assert further.returncode == 0, (further.stdout + further.stderr)[-3000:]
    assert f"resuming from {folder / 'checkpoints' / 'last.ckpt'}" in further.stdout + further.stderr
    results = json.loads((folder / "results.json").read_text())
    assert results["steps"] == 4
    # the whole run's wall time: the first attempt's, as its checkpoint holds it, and this one's
    assert results["metrics"]["time/wall_s"] > first_attempt_s
