"""Which checkpoint a run resumes from, and the W&B run it continues.

``run.ckpt_path``:
- ``null``: start fresh; except in a requeued job (SLURM's, or submitit's local executor's), which resumes from
  the newest checkpoint in its own run folder (the same folder for every attempt of a job).
- ``last``: the newest checkpoint that loads, in this run's folder, else in the newest earlier run folder
  of the same recipe that has one (``<log_dir>/<recipe>/runs/*``) and whose config (``.hydra/config.yaml``)
  matches this one but for `config_change.IGNORED_KEYS`, resolved values included
  (`config_change.RESOLVED_FILE`: ``$LARS_DATA_DIR`` is the same ``${oc.env:...}`` in both Hydra files however
  its value changed); a fresh start (with a notice) if none. A newer run with another
  config is a one-line error that lists the keys that differ and how to resume it anyway. The resumed run
  writes its checkpoints into the folder it resumed from: one run's checkpoints stay in one folder.
  Damaged files (truncated, not a checkpoint) are skipped with a counted warning. An earlier run that a live
  process still holds (`lightning_lars.runtime.run_folder`) is a one-line error, never resumed; one that
  finished (its ``results.json``) ends the search with `run_folder.Finished`: nothing to train.
- a path: that checkpoint, as the user asked; a missing or damaged file is a one-line `UserError`. Where the
  config of the run it was saved in differs, one warning line names the keys and what the change does to
  the schedule and the data position (`lightning_lars.runtime.config_change`).

Whichever way it was found, a checkpoint at or past the step where this run ends, saved by a run that finished
(its ``results.json``), is `run_folder.Finished` too: resuming it would train nothing and write that run's
results again without its final evaluation (a pinned ``hydra.run.dir`` resumed with the run's own length).

A checkpoint is a file (``torch.save``) or, under ``strategy=fsdp2`` (``save_distributed_checkpoint``), a
directory ``*.ckpt/`` of torch.distributed.checkpoint shards plus Lightning's ``meta.pt`` (everything but the
weights and optimizer state: loops, callbacks, the W&B run id), which rank 0 writes after the shards: a
directory without it is an interrupted save.
"""

from __future__ import annotations

import logging
import zipfile
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, open_dict

from lightning_lars.core.errors import UserError
from lightning_lars.parallel import safe_checkpoint
from lightning_lars.parallel.safe_checkpoint import UnsafeCheckpoint
from lightning_lars.runtime import config_change, run_folder
from lightning_lars.runtime.preemption import scheduled_job_id

log = logging.getLogger(__name__)

# written by lightning_lars.runtime.checkpointing.ResumeState
WANDB_KEY = "wandb_run_id"
PER_RANK_KEY = "resume_state_per_rank"  # [{"rng": ..., "aggregates": ...} for each rank]
WALL_KEY = "wall_s_of_the_run"  # seconds the run trained and evaluated up to this checkpoint, all attempts
REQUIRED_KEYS = ("state_dict", "loops", "global_step")
SHARDED_META = "meta.pt"  # lightning.fabric.utilities.load._METADATA_FILENAME


class DamagedCheckpoint(Exception):
    """A file that is not a complete Lightning checkpoint."""


def load_meta(path: str | Path) -> dict[str, Any]:
    """The checkpoint's top-level entries, tensors memory-mapped (cheap even for GBs), read as data only;
    raises `DamagedCheckpoint`, or `UnsafeCheckpoint` for a pickle that would run code.

    For a directory checkpoint: its ``meta.pt`` (the weights stay in the shards, unread)."""
    if Path(path).is_dir():
        return _load_sharded_meta(Path(path))
    if not zipfile.is_zipfile(path):  # torch.save's format is a zip whose index closes the file
        raise DamagedCheckpoint(f"{path}: truncated, or not a torch checkpoint")
    try:
        checkpoint = safe_checkpoint.load(path, map_location="cpu", mmap=True)
    except UnsafeCheckpoint:
        raise  # never skipped as damaged: a file that would run code is the user's to know about
    except Exception as error:  # noqa: BLE001
        # a truncated zip or a stray file raises many types: RuntimeError, UnpicklingError, EOFError, ...
        raise DamagedCheckpoint(f"{path}: {_first_line(error)}") from None
    if not isinstance(checkpoint, dict) or any(k not in checkpoint for k in REQUIRED_KEYS):
        raise DamagedCheckpoint(f"{path}: not a Lightning training checkpoint")
    return checkpoint


def _load_sharded_meta(path: Path) -> dict[str, Any]:
    meta = path / SHARDED_META
    if not meta.is_file() or not (path / ".metadata").is_file():  # .metadata: the shards' index (torch DCP)
        raise DamagedCheckpoint(
            f"{path}: distributed checkpoint without {SHARDED_META} or .metadata (interrupted save)"
        )
    try:
        safe_checkpoint.check_distributed(path)  # the shards' index and entries, which Lightning reads first
        checkpoint = safe_checkpoint.load(meta, map_location="cpu")
    except UnsafeCheckpoint:
        raise
    except Exception as error:  # noqa: BLE001
        raise DamagedCheckpoint(f"{meta}: {_first_line(error)}") from None
    if not isinstance(checkpoint, dict) or any(
        k not in checkpoint for k in REQUIRED_KEYS if k != "state_dict"
    ):
        raise DamagedCheckpoint(f"{path}: not a Lightning training checkpoint")
    return checkpoint


def _first_line(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0]}" if lines else type(error).__name__


def candidates(folder: Path) -> list[Path]:
    """``*.ckpt`` files and directories under ``folder``, newest first (temp files of an interrupted write are
    dot-files: skipped). A directory's age is its ``meta.pt``'s, written last."""
    found = [p for p in folder.rglob("*.ckpt") if (p.is_file() or p.is_dir()) and not p.name.startswith(".")]
    return sorted(found, key=lambda p: (_written_ns(p), p.name), reverse=True)


def _written_ns(path: Path) -> int:
    meta = path / SHARDED_META
    return (meta if meta.is_file() else path).stat().st_mtime_ns


def newest_good(folders: list[Path]) -> Path | None:
    """The newest checkpoint that loads, searching ``folders`` in order; warns once about damaged ones."""
    damaged = []
    for folder in folders:
        for path in candidates(folder) if folder.is_dir() else []:
            try:
                load_meta(path)
            except DamagedCheckpoint as error:
                damaged.append(str(error))
                continue
            if damaged:
                log.warning(f"skipped {len(damaged)} damaged checkpoint(s), newest: {damaged[0]}")
            return path
    if damaged:
        log.warning(f"skipped {len(damaged)} damaged checkpoint(s), newest: {damaged[0]}")
    return None


def search_folders(run_dir: Path, runs_dir: Path) -> list[Path]:
    """This run's folder first, then earlier runs of the recipe, newest folder first."""
    earlier = (
        sorted(
            (p for p in runs_dir.glob("*") if p.is_dir() and p.resolve() != run_dir.resolve()),
            key=lambda p: p.stat().st_mtime_ns,
            reverse=True,
        )
        if runs_dir.is_dir()
        else []
    )
    return [run_dir, *earlier]


def _newest_of_this_config(cfg: DictConfig, run_dir: Path) -> Path | None:
    """``last``: the newest good checkpoint of a run with this config; if only runs of another config have one,
    a one-line error naming the keys that differ and how to resume anyway."""
    runs_dir = Path(cfg.paths.log_dir) / str(cfg.recipe_name) / "runs"
    matching, other = [], []
    for folder in search_folders(run_dir, runs_dir):
        own = folder.resolve() == run_dir.resolve()
        differs = [] if own else config_change.differences_from_run(cfg, folder, run_dir)
        (other if differs else matching).append((folder, differs))
    for folder, _ in matching:  # newest first: a live run or a finished one ends the search
        # this run's own folder (a pinned hydra.run.dir) is resumed whatever it holds: the user named it
        earlier = folder.resolve() != run_dir.resolve()
        holder = run_folder.live_holder(folder) if earlier else None
        if holder is not None and run_folder.holds_locks():  # rank 0's own lock: never a rank's reason
            raise UserError(
                f"run.ckpt_path=last: the newest run of this config, {folder}, is still running ({holder});"
                " let it finish or stop it, then resume; or leave out run.ckpt_path to start a new run"
            )
        results = run_folder.finished(folder) if earlier else None
        if results is not None:
            raise run_folder.Finished(run_folder.finished_message(folder, results))
        found = newest_good([folder])
        if found is not None:
            return found
    for folder, differs in other:  # newest first: the run the user most likely meant
        path = newest_good([folder])
        if path is None:
            continue
        raise UserError(
            f"run.ckpt_path=last: no checkpoint of a run with this config; the newest of this recipe,"
            f" {path}, is from a run whose config differs: {config_change.shown(differs)}; resume it anyway with"
            f" run.ckpt_path={path} and the same overrides, or leave out run.ckpt_path to start afresh"
        )
    return None


def resolve_ckpt_path(cfg: DictConfig, end_step: int | None = None) -> str | None:
    """The checkpoint ``trainer.fit(ckpt_path=...)`` gets for this config (see the module docstring); ``end_step``:
    the optimizer step this run ends at (the plan's), where known."""
    found = _wanted_checkpoint(cfg)
    if found is not None and end_step is not None:
        _refuse_ended(Path(found), end_step)
    if found is not None and cfg.run.ckpt_path is not None:
        log.info(f"resuming from {found}")
    return found


def _refuse_ended(path: Path, end_step: int) -> None:
    """`run_folder.Finished` for a checkpoint at or past ``end_step`` whose run folder holds a finished run."""
    step = int(load_meta(path)["global_step"])
    if step < end_step:
        return
    folder = checkpoint_run_folder(path)
    results = run_folder.finished(folder)
    if results is not None:
        raise run_folder.Finished(
            f"{path} is at step {step} and this run ends at step {end_step}: its run finished"
            f" ({run_folder.result_text(results)}, {folder / run_folder.RESULTS_FILE}); nothing to train: set a"
            " later end (trainer.max_steps or trainer.max_epochs) to train it further, or leave out run.ckpt_path"
            " and give a new hydra.run.dir to train again"
        )


def _wanted_checkpoint(cfg: DictConfig) -> str | None:
    wanted = cfg.run.ckpt_path
    run_dir = Path(cfg.paths.output_dir)
    if wanted is None:
        job_id = scheduled_job_id()
        if job_id is None:
            return None
        found = newest_good([run_dir])  # a requeued job: its run folder is the job's (job id, sweep folder)
        if found:
            log.info(f"resuming requeued job {job_id} from {found}")
        return str(found) if found else None
    if str(wanted) == "last":
        found = _newest_of_this_config(cfg, run_dir)
        if found is None:
            log.warning(
                "run.ckpt_path=last: no checkpoint of this recipe and config yet; starting from scratch"
            )
            return None
        return str(found)
    path = Path(str(wanted)).expanduser()
    if not path.exists():
        raise UserError(
            f"checkpoint {path} not found: give an existing .ckpt file or directory, or run.ckpt_path=last"
            " for the newest checkpoint of this recipe"
        )
    try:
        meta = load_meta(path)
    except DamagedCheckpoint as error:
        raise UserError(
            f"checkpoint {error}: damaged or not a checkpoint; use run.ckpt_path=last for the newest good one"
        ) from None
    folder = checkpoint_run_folder(path)
    differs = (
        config_change.differences_from_run(cfg, folder, run_dir)
        if folder.resolve() != run_dir.resolve()
        else []
    )
    if differs:  # the user named the file: resumed as asked, saying what the changes do
        log.warning(config_change.notice(path, int(meta["global_step"]), differs))
    return str(path)


def checkpoint_run_folder(path: Path) -> Path:
    """The run folder a checkpoint was saved in: ``<run>/checkpoints/*.ckpt`` or ``<run>/hpc_ckpt_<n>.ckpt``."""
    return path.parent.parent if path.parent.name == "checkpoints" else path.parent


def run_folder_of(cfg: DictConfig, ckpt_path: str) -> Path | None:
    """The earlier run folder under ``<log_dir>/<recipe>/runs`` a checkpoint belongs to; None for a checkpoint
    elsewhere (a file of the user's) or in this run's own folder."""
    runs = (Path(cfg.paths.log_dir) / str(cfg.recipe_name) / "runs").resolve()
    inside = [p for p in Path(ckpt_path).resolve().parents if p.parent == runs]
    if not inside or inside[0] == Path(cfg.paths.output_dir).resolve():
        return None
    return inside[0]


def keep_checkpoints_together(cfg: DictConfig, ckpt_path: str | None) -> None:
    """A run resumed from an earlier run folder of its recipe saves its checkpoints in that run's checkpoint
    folder, so one run's checkpoints stay in one place however often it is resumed."""
    checkpoint = cfg.get("callbacks", {}).get("checkpoint") if ckpt_path else None
    if checkpoint is None:
        return
    runs = (Path(cfg.paths.log_dir) / str(cfg.recipe_name) / "runs").resolve()
    source = Path(ckpt_path).resolve()
    if runs not in source.parents or Path(cfg.paths.output_dir).resolve() in source.parents:
        return
    folder = source.parent if source.parent.name == "checkpoints" else source.parent / "checkpoints"
    with open_dict(cfg):
        checkpoint.dirpath = str(folder)
    log.info(f"checkpoints of this resumed run go to {folder}, beside the ones it resumed from")


def wandb_run_id(ckpt_path: str | None) -> str | None:
    """The W&B run id stored in a checkpoint by `lightning_lars.runtime.checkpointing.ResumeState`, if any."""
    if ckpt_path is None:
        return None
    return load_meta(ckpt_path).get(WANDB_KEY)


def logger_kwargs(cfg: DictConfig, ckpt_path: str | None) -> dict[str, Any]:
    """Extra arguments for the W&B logger so a resumed run continues its W&B run (``id=..., resume="allow"``)."""
    target = str(cfg.logger.get("_target_", "")) if isinstance(cfg.logger, DictConfig) else ""
    run_id = wandb_run_id(ckpt_path)
    if not run_id or "wandb" not in target.lower():
        return {}
    log.info(f"W&B: continuing run {run_id}")
    return {"id": run_id, "resume": "allow"}
