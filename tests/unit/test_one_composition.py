"""Hydra composes a job's config once: ``--cfg job`` and a training run each load it one time, counted by wrapping
Hydra's own config loader (the oracle: Hydra's ``ConfigLoaderImpl.load_configuration``, which every composition --
``@hydra.main``'s and the compose API's -- goes through), with the run mode each asks for. Before a run or a sweep
``@hydra.main`` also loads the config once in MULTIRUN mode, only to read ``hydra.mode`` (``Hydra.get_mode``,
hydra/_internal/utils.py, any Hydra app's; errors there are ignored): counted apart. The package itself never
imports ``hydra._internal``; only this test reaches in to count."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest
from helpers import ROOT, run

COUNTED = """import atexit, runpy, sys
from hydra._internal.config_loader_impl import ConfigLoaderImpl
calls = []
load = ConfigLoaderImpl.load_configuration
def counted(self, *args, **kwargs):
    calls.append(kwargs["run_mode"].name)
    return load(self, *args, **kwargs)
ConfigLoaderImpl.load_configuration = counted
atexit.register(lambda: print("compositions:", *calls, file=sys.stderr, flush=True))
sys.argv = ["lightning_lars.train", *sys.argv[1:]]
runpy.run_module("lightning_lars.train", run_name="__main__")
"""


def compositions(done) -> list[str]:
    """The run mode of each composition, in order."""
    counts = [line for line in done.stderr.splitlines() if line.startswith("compositions:")]
    assert len(counts) == 1, done.stdout[-2000:] + done.stderr[-3000:]
    return counts[0].split()[1:]


def test_cfg_job_composes_once(tmp_path):
    done = run([sys.executable, "-c", COUNTED, "recipe=goyal_8k", "trainer.max_steps=2", "--cfg", "job"])
    assert done.returncode == 0, done.stderr[-3000:]
    assert compositions(done) == ["RUN"]


@pytest.mark.slow
def test_a_two_step_training_run_composes_once(data_dir, tmp_path):
    args = ["recipe=demo", f"paths.data_dir={data_dir}", "model.arch=test_resnet", "trainer.max_steps=2"]
    args += ["trainer.limit_val_batches=1", "~logger", f"hydra.run.dir={tmp_path / 'run'}"]
    done = run([sys.executable, "-c", COUNTED, *args], timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    assert compositions(done) == ["MULTIRUN", "RUN"]  # Hydra's probe of hydra.mode, then the job's one
    assert "plan: stops early after step 2" in done.stdout + done.stderr  # it trained, to the planned step


def test_the_package_does_not_import_hydras_internals():
    for path in sorted((ROOT / "lightning_lars").rglob("*.py")):
        tree = ast.parse(Path(path).read_text(encoding="utf-8"))
        names = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
        names += [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
        assert not [n for n in names if n.startswith("hydra._internal")], path


def test_lightnings_own_trainer_refusal_is_one_line_naming_the_key():
    """No copy of the Trainer's signature: Lightning's ``Trainer(...)`` refuses an argument it does not take
    (the oracle: the installed Lightning), and the entry point prints that as one line."""
    from hydra.errors import InstantiationException
    from hydra.utils import instantiate
    from omegaconf import OmegaConf

    from lightning_lars.config.compose import explain_instantiation_error

    cfg = OmegaConf.create(
        {"trainer": {"_target_": "lightning.pytorch.Trainer", "max_step": 1, "logger": False}}
    )
    with pytest.raises(InstantiationException) as raised:
        instantiate(cfg.trainer)
    line = explain_instantiation_error(raised.value)
    assert "\n" not in line and "'trainer.max_step'" in line and "takes no such argument" in line, line
