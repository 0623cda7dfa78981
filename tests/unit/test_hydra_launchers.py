"""conf/hydra/launcher/*.yaml as Hydra and submitit read them: Hydra instantiates the launcher from the config
(resolving its values, lists twice), submitit writes the sbatch text, and bash runs its setup lines. The real
SLURM round trip is tests/integration/test_slurm_launcher.py."""

from __future__ import annotations

import os
import subprocess

from hydra import compose, initialize_config_dir
from hydra.core.plugins import Plugins
from submitit.slurm.slurm import _make_sbatch_string

from lightning_lars.config import compose as config


def launcher(tmp_path, name: str, *overrides: str):
    """The launcher Hydra builds for ``-m hydra/launcher=NAME``: ``instantiate_launcher`` resolves a list's items,
    re-wraps them, and the launcher's ``__init__`` resolves every value again."""
    with initialize_config_dir(config_dir=str(config.CONF_DIR), version_base="1.3"):
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
