"""Which checkpoint a run resumes from: ``run.ckpt_path=last`` finds the newest loadable checkpoint of a run with
this config (this run's folder first, damaged files skipped, another config refused naming its keys), a finished
run resumed at its own end is finished, an explicit path fails in one line, and a W&B run id comes back from the
checkpoint. Real checkpoints written by our `AtomicCheckpointIO`, Hydra's saved configs as a finished run leaves
them; seconds on CPU."""

from __future__ import annotations

import json
import logging
import os
import re
from pathlib import Path

import pytest
import torch
import yaml
from omegaconf import OmegaConf

from lightning_lars.core.errors import UserError
from lightning_lars.runtime import config_change, resume, run_folder
from lightning_lars.runtime.checkpoint_io import AtomicCheckpointIO


def payload(tag: float) -> dict:
    return {"state_dict": {"w": torch.full((1000,), tag)}, "loops": {}, "global_step": int(tag)}


def write_checkpoint(path: Path, step: int, mtime: int) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    AtomicCheckpointIO().save_checkpoint(payload(float(step)), path)
    os.utime(path, ns=(mtime, mtime))
    return path


def cfg_for(tmp_path, ckpt_path, run_dir="runs/now"):
    return OmegaConf.create(
        {
            "run": {"ckpt_path": ckpt_path},
            "recipe_name": "demo",
            "paths": {"output_dir": str(tmp_path / "logs/demo" / run_dir), "log_dir": str(tmp_path / "logs")},
            "logger": {"_target_": "lightning_lars.report.wandb_logger.wandb_logger"},
        }
    )


def test_last_picks_newest_loadable_checkpoint_skipping_damaged(tmp_path, monkeypatch, caplog):
    monkeypatch.delenv("SLURM_NTASKS", raising=False)
    runs = tmp_path / "logs/demo/runs"
    write_checkpoint(runs / "old/checkpoints/last.ckpt", 4, 1_000)
    good = write_checkpoint(runs / "mid/checkpoints/last.ckpt", 8, 2_000)
    damaged = write_checkpoint(runs / "new/checkpoints/last.ckpt", 12, 3_000)
    damaged.write_bytes(damaged.read_bytes()[:500])  # truncated, e.g. by a copy that died
    (runs / "new/checkpoints/.last.ckpt.tmp-123").write_bytes(b"partial")  # an interrupted atomic write
    os.utime(runs / "new", ns=(3_000, 3_000))
    os.utime(runs / "mid", ns=(2_000, 2_000))
    os.utime(runs / "old", ns=(1_000, 1_000))
    with caplog.at_level(logging.WARNING, logger="lightning_lars.runtime.resume"):
        assert resume.resolve_ckpt_path(cfg_for(tmp_path, "last")) == str(good)
    assert any("skipped 1 damaged" in r.getMessage() for r in caplog.records)
    assert resume.resolve_ckpt_path(cfg_for(tmp_path, None)) is None  # null: fresh start outside SLURM


def test_last_prefers_this_run_folder_and_starts_fresh_without_any(tmp_path, monkeypatch):
    monkeypatch.delenv("SLURM_NTASKS", raising=False)
    assert resume.resolve_ckpt_path(cfg_for(tmp_path, "last")) is None
    runs = tmp_path / "logs/demo/runs"
    write_checkpoint(runs / "other/checkpoints/last.ckpt", 8, 5_000)
    mine = write_checkpoint(runs / "now/checkpoints/epoch0-step4.ckpt", 4, 1_000)
    assert resume.resolve_ckpt_path(cfg_for(tmp_path, "last")) == str(mine)


def this_config(tmp_path):
    """A run's config as `run.ckpt_path=last` compares it: the resume keys plus a schedule, a dataset, a model."""
    cfg = cfg_for(tmp_path, "last")
    cfg.scheduler = {"base_lr": 5.0}
    cfg.model = {"arch": "resnet10t"}
    cfg.paths.data_dir = "/data"
    return cfg


def earlier_run(runs: Path, name: str, cfg, step: int, mtime: int, **changed) -> Path:
    """A run folder as a finished run leaves it: Hydra's .hydra/config.yaml (``cfg`` with ``changed`` dotted keys
    set) and a checkpoint; returns the checkpoint."""
    config = cfg.copy()
    for key, value in changed.items():
        OmegaConf.update(config, key.replace("__", "."), value, force_add=True)
    (runs / name / ".hydra").mkdir(parents=True)
    (runs / name / ".hydra" / "config.yaml").write_text(yaml.safe_dump(OmegaConf.to_container(config)))
    path = write_checkpoint(runs / name / "checkpoints" / "last.ckpt", step, mtime)
    os.utime(runs / name, ns=(mtime, mtime))
    return path


@pytest.mark.parametrize(
    "key, earlier, now",
    [
        ("scheduler.base_lr", 1.0, 5.0),  # a changed schedule once resumed silently
        ("paths.data_dir", "/other", "/data"),  # and so did another dataset
        ("model.arch", "resnet18", "resnet10t"),  # a state-dict traceback
    ],
)
def test_last_refuses_a_run_of_another_config_naming_the_keys_and_the_forcing_path(
    key, earlier, now, tmp_path, monkeypatch
):
    monkeypatch.delenv("SLURM_NTASKS", raising=False)
    cfg = this_config(tmp_path)
    other = earlier_run(
        tmp_path / "logs/demo/runs", "other", cfg, 8, 1_000, **{key.replace(".", "__"): earlier}
    )
    with pytest.raises(UserError) as raised:
        resume.resolve_ckpt_path(cfg)
    message = str(raised.value)
    assert (
        f"config differs: {key} ({earlier} -> {now}); resume it anyway with run.ckpt_path={other}" in message
    )
    assert "\n" not in message


def test_last_skips_a_newer_run_of_another_config_for_the_newest_of_this_one(tmp_path, monkeypatch):
    monkeypatch.delenv("SLURM_NTASKS", raising=False)
    cfg = this_config(tmp_path)
    runs = tmp_path / "logs/demo/runs"
    # how to resume, log and show progress, and the loader's workers may change between a run and its resume
    mine = earlier_run(
        runs,
        "mine",
        cfg,
        4,
        1_000,
        run__ckpt_path=None,
        logger__offline=False,
        callbacks__progress__every_n_steps=5,
        data__num_workers=8,
    )
    earlier_run(runs, "newer", cfg, 8, 2_000, scheduler__base_lr=1.0)
    assert resume.resolve_ckpt_path(cfg) == str(mine)


def test_last_compares_values_after_resolution_an_environment_variable_included(tmp_path, monkeypatch):
    """$LARS_DATA_DIR changes the data, not Hydra's saved text ``${oc.env:LARS_DATA_DIR,...}``."""
    monkeypatch.delenv("SLURM_NTASKS", raising=False)
    monkeypatch.setenv("LARS_DATA_DIR", "/data/a")
    cfg = this_config(tmp_path)
    cfg.paths.data_dir = "${oc.env:LARS_DATA_DIR,/data}"
    cfg.data = {"train_path": "${paths.data_dir}/demo/train.beton"}
    runs = tmp_path / "logs/demo/runs"
    saved = earlier_run(runs, "earlier", cfg, 4, 1_000)
    at_its_start = cfg.copy()
    at_its_start.paths.output_dir = str(runs / "earlier")  # its own folder: a per-run value, not a difference
    config_change.write_resolved_config(at_its_start)
    assert (
        yaml.safe_load((runs / "earlier" / config_change.RESOLVED_FILE).read_text())["paths"]["data_dir"]
        == "/data/a"
    )
    assert resume.resolve_ckpt_path(cfg) == str(saved)

    monkeypatch.setenv("LARS_DATA_DIR", "/data/b")
    with pytest.raises(
        UserError,
        match=re.escape(
            "config differs: data.train_path (/data/a/demo/train.beton ->"
            " /data/b/demo/train.beton); paths.data_dir (/data/a -> /data/b)"
        ),
    ):
        resume.resolve_ckpt_path(cfg)


def test_explicit_checkpoint_path_errors_are_one_line(tmp_path):
    with pytest.raises(UserError, match=r"not found: give an existing \.ckpt file"):
        resume.resolve_ckpt_path(cfg_for(tmp_path, str(tmp_path / "missing.ckpt")))
    stray = tmp_path / "notes.ckpt"
    stray.write_text("not a checkpoint")
    with pytest.raises(UserError, match="damaged or not a checkpoint") as raised:
        resume.resolve_ckpt_path(cfg_for(tmp_path, str(stray)))
    assert "\n" not in str(raised.value)


def test_wandb_resume_arguments_come_from_the_checkpoint(tmp_path):
    path = tmp_path / "a.ckpt"
    AtomicCheckpointIO().save_checkpoint({**payload(1.0), resume.WANDB_KEY: "abc123"}, path)
    cfg = cfg_for(tmp_path, str(path))
    assert resume.logger_kwargs(cfg, str(path)) == {"id": "abc123", "resume": "allow"}
    assert resume.logger_kwargs(cfg, None) == {}
    cfg.logger = {"_target_": "lightning.pytorch.loggers.CSVLogger"}
    assert resume.logger_kwargs(cfg, str(path)) == {}


def finished_run(folder: Path, step: int, top1: float) -> Path:
    """A run folder as a finished run leaves it: its checkpoint at ``step`` and its ``results.json``."""
    path = write_checkpoint(folder / "checkpoints" / "last.ckpt", step, 1_000)
    (folder / run_folder.RESULTS_FILE).write_text(json.dumps({"metrics": {"val/top1": top1}}))
    return path


@pytest.mark.parametrize("how", ["last", "path"])
def test_a_finished_run_resumed_at_its_own_end_is_finished_and_a_later_end_resumes_it(
    how, tmp_path, monkeypatch
):
    monkeypatch.delenv("SLURM_NTASKS", raising=False)
    folder = tmp_path / "logs/demo/runs/now"  # the run's own folder, as a pinned hydra.run.dir
    path = finished_run(folder, 8, 0.25)
    cfg = cfg_for(tmp_path, "last" if how == "last" else str(path))
    with pytest.raises(run_folder.Finished) as ended:
        resume.resolve_ckpt_path(cfg, end_step=8)
    message = str(ended.value)
    assert f"{path} is at step 8 and this run ends at step 8" in message and "top-1 25.00 %" in message
    assert "\n" not in message
    assert resume.resolve_ckpt_path(cfg, end_step=12) == str(path)  # a longer run trains it further
    (folder / run_folder.RESULTS_FILE).unlink()  # stopped after its last checkpoint, before its results
    assert resume.resolve_ckpt_path(cfg, end_step=8) == str(path)
