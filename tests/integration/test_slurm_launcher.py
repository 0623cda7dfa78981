"""``-m hydra/launcher=slurm`` (conf/hydra/launcher/slurm.yaml) as a user runs it, on a real one-node SLURM
cluster (tests/integration/slurm_cluster.py): Hydra's submitit launcher writes the sbatch script and submits
the sweep as an array job, srun starts each task, and a job preempted the way SLURM warns it (``scancel
--signal=USR2``: submitit's ``--signal=USR2@90``, to the job step's tasks) checkpoints, is requeued by
submitit's handler with a real ``scontrol requeue`` and resumes from that checkpoint in the same W&B run.

Without slurm-wlm or root the cluster test is skipped with the reason and the command that installs it (tests
download nothing); the sbatch text test needs neither.
"""

from __future__ import annotations

import os
import subprocess

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.plugins import Plugins
from preempted_sweep import assert_resumed_in_its_wandb_run, logged, sweep_command, wait_for
from resume_runs import ROOT, env, make_demo_data
from slurm_cluster import slurm_cluster, why_not
from submitit.slurm.slurm import _make_sbatch_string

from lightning_lars.config.paths import CONF_DIR

pytestmark = pytest.mark.slow


def launcher(tmp_path, name: str, *overrides: str):
    """The launcher Hydra builds for ``-m hydra/launcher=NAME``: ``instantiate_launcher`` resolves a list's items,
    re-wraps them, and the launcher's ``__init__`` resolves every value again."""
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose(
            "train",
            overrides=[f"hydra/launcher={name}", "recipe=demo", f"paths.log_dir={tmp_path}", *overrides],
            return_hydra_config=True,
        )
        return Plugins.instance().instantiate_launcher(hydra_context=None, task_function=None, config=cfg)


def test_slurm_setup_hands_the_jobs_own_cpus_per_task_to_srun(tmp_path):
    slurm = launcher(tmp_path, "slurm", "trainer.devices=8", "trainer.num_nodes=4")
    assert slurm.params["nodes"] == 4 and slurm.params["tasks_per_node"] == 8
    script = _make_sbatch_string(
        command="python -u -m submitit.core._submit folder",
        folder=tmp_path,
        setup=slurm.params["setup"],
        cpus_per_task=slurm.params["cpus_per_task"],
    )
    assert "export SRUN_CPUS_PER_TASK=$SLURM_CPUS_PER_TASK" in script.splitlines()
    assert "#SBATCH --cpus-per-task=8" in script.splitlines()
    # the shell, not OmegaConf, expands it: what sbatch sets in the job is what srun then reads
    setup = "\n".join(slurm.params["setup"]) + "\necho $SRUN_CPUS_PER_TASK"
    done = subprocess.run(
        ["bash", "-c", setup],
        env={**os.environ, "SLURM_CPUS_PER_TASK": "6"},
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout.strip() == "6"


def test_a_slurm_sweep_finishes_and_a_preempted_job_resumes_in_its_wandb_run(tmp_path):
    reason = why_not()
    if reason is not None:  # tests download nothing: the cluster comes from the machine's own packages
        pytest.skip(f"no one-node SLURM cluster here: {reason}")
    make_demo_data(tmp_path)
    logs = tmp_path / "logs"
    command = sweep_command(
        "slurm",
        logs,
        "hydra.launcher.cpus_per_task=1",  # this node's 2 cores hold both jobs
        "hydra.launcher.gpus_per_node=null",  # a CPU node: no --gpus-per-node
    )
    with slurm_cluster(tmp_path / "slurm") as cluster:
        job_env = {**env(tmp_path), "SLURM_CONF": cluster["SLURM_CONF"]}
        with open(tmp_path / "sweep.log", "w") as out:
            sweep = subprocess.Popen(command, cwd=ROOT, env=job_env, stdout=out, stderr=subprocess.STDOUT)
            sweep_dir = wait_for(
                lambda: next(
                    (p for p in (logs / "demo" / "multiruns").glob("*") if (p / "0").is_dir()), None
                ),
                sweep,
                message="no job folder",
            )
            job = sweep_dir / "0"
            wait_for((job / "checkpoints" / "epoch0-step2.ckpt").exists, sweep, message="no checkpoint")
            queued = subprocess.run(["squeue", "-h", "-o", "%i"], env=job_env, capture_output=True, text=True)
            # array task 0: the sweep's job 0
            (task0,) = [i for i in queued.stdout.split() if i.endswith("_0")]
            subprocess.run(["scancel", "--signal=USR2", task0], env=job_env, check=True)
            # SLURM holds a requeued job (reason BeginTime, about 30 s here) before it may start again. Not
            # released early (scontrol update StartTime=now): slurmd may still be ending the first attempt, and
            # then refuses the new one ("Job 2 already killed ... Job credential revoked"), which ends exit 1.
            sweep.wait(timeout=900)
    output = (tmp_path / "sweep.log").read_text()
    assert sweep.returncode == 0, output[-3000:]

    array = task0.split("_")[0]  # one sbatch script for the sweep's array job
    submitted = sweep_dir / ".submitit" / array / f"{array}_submission.sh"
    assert "export SRUN_CPUS_PER_TASK=$SLURM_CPUS_PER_TASK" in submitted.read_text().splitlines()
    saved, step = assert_resumed_in_its_wandb_run(sweep_dir, job)
    # the tasks' stdout and stderr (submitit's, SLURM's lines) and Hydra's job log (ours, with times)
    job_logs = "".join(
        p.read_text() for p in [*(sweep_dir / ".submitit" / task0).glob("*_log.*"), job / "train.log"]
    )
    assert f"preempted: signal SIGUSR2 at step {step}: checkpoint {saved}" in job_logs
    # SLURM's own line: scontrol requeue (submitit's handler, rank 0) ended the first attempt
    assert "CANCELLED AT" in job_logs and "DUE TO JOB REQUEUE" in job_logs
    assert f"resuming requeued job {task0} from {saved}" in job_logs
    assert f"Restoring states from the checkpoint path at {saved}" in job_logs

    # the requeued attempt counts its start-up from its own start, after SLURM ended the first one
    log = (job / "train.log").read_text()
    ((caught, _),) = logged(log, r"Caught signal SIGUSR2")
    first, (again, (again_s,)) = logged(log, r"first optimizer step done ([0-9.]+) s")
    since_signal = (again - caught).total_seconds()
    assert 0 < float(again_s) <= since_signal, (again, again_s, caught)
