"""A run's hold on its folder while it lives, and what an earlier run's folder says: still running, or finished.

A run holds an exclusive ``flock`` on ``<run folder>/.run.lock`` from its start to its end (the kernel drops it
when the process dies, however it dies), and on the folder of the run it resumed, where its checkpoints go.
``run.ckpt_path=last`` asks each earlier folder for that lock (`live_holder`): a run still training is never
resumed by a second one. ``flock``, not ``lockf``: a POSIX lock is dropped when the process closes any handle on
the file, which probing a folder this process holds would do.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import socket
from collections.abc import Iterator
from pathlib import Path

from lightning_lars.config.paths import MADE_HERE
from lightning_lars.core.errors import UserError

LOCK_FILE = ".run.lock"
RESULTS_FILE = "results.json"  # lightning_lars.report.results writes it when a run ends (a higher layer)
# Set to a process's rank by the launchers (torchrun, Lightning's own, SLURM's srun, jsrun): rank 0 holds the lock.
RANK_VARIABLES = ("RANK", "LOCAL_RANK", "NODE_RANK", "GROUP_RANK", "SLURM_PROCID", "JSM_NAMESPACE_RANK")

_held: dict[Path, int] = {}  # folder -> the descriptor whose lock this process holds


def _drop_inherited_locks() -> None:
    """In a forked child (a DataLoader worker): close its copies of the lock descriptors. A flock belongs to the
    open file, which fork shares: a worker that outlives a killed run (it notices its parent's death only at
    its next check, seconds later) would keep the folder locked, and the resume right after would be refused
    as "in use by a live run". Closing the child's copy leaves the parent's lock in place."""
    for fd in _held.values():
        with contextlib.suppress(OSError):
            os.close(fd)
    _held.clear()


os.register_at_fork(after_in_child=_drop_inherited_locks)


class Finished(Exception):
    """``run.ckpt_path=last`` found that the newest run of this config finished: nothing to resume."""


def holds_locks() -> bool:
    """Global rank 0 holds the locks; every other rank of a run shares its folder and would find it held."""
    return all(os.environ.get(name, "0") == "0" for name in RANK_VARIABLES)


def _holder() -> str:
    return f"pid {os.getpid()} on {socket.gethostname()}"


def hold(folder: str | Path) -> None:
    """Hold ``folder``'s lock until `release` (or this process's end); a one-line error if a live run holds it."""
    folder = Path(folder).resolve()
    if folder in _held or not holds_locks():
        return
    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.read(fd, 200).decode(errors="replace").strip() or "another process"
        os.close(fd)
        raise UserError(
            f"run folder {folder} is in use by a live run ({holder}); leave out hydra.run.dir for a folder of"
            " this run's own, or stop that run first"
        ) from None
    os.ftruncate(fd, 0)
    os.write(fd, f"{_holder()}\n".encode())
    _held[folder] = fd


def release(folder: str | Path) -> None:
    fd = _held.pop(Path(folder).resolve(), None)
    if fd is not None:
        os.close(fd)  # closing the descriptor drops its flock


@contextlib.contextmanager
def holding(folder: str | Path) -> Iterator[None]:
    """`hold` ``folder`` for the block, and every folder held inside it (a resumed run's) until its end."""
    before = set(_held)
    hold(folder)
    try:
        yield
    finally:
        for held in set(_held) - before:
            release(held)


# What a run writes into its folder before it trains: Hydra's .hydra/ and train.log, the lock, and the resolved
# config (lightning_lars.runtime.config_change's RESOLVED_FILE). Anything else (checkpoints/, wandb/) is a run's record.
BEFORE_TRAINING = frozenset({".hydra", "train.log", LOCK_FILE, "resolved_config.yaml"})


# What Hydra writes into a sweep's folder before its first job: the sweep's overrides and config
SWEEP_RECORD = "multirun.yaml"


def discard_refused(folder: str | Path) -> bool:
    """Remove ``folder`` and the parents made with it, for a run refused before it trained: only a folder this
    process made (``${fresh_folder:}``, never a ``hydra.run.dir`` of the user's) and that holds nothing but
    `BEFORE_TRAINING`. A sweep's job folder sits in the sweep folder this process made: the job's folder goes,
    and the sweep's too when nothing but Hydra's `SWEEP_RECORD` is left in it (its first job was refused).
    Returns whether ``folder`` was removed."""
    folder = Path(folder).resolve()
    made = folder if folder in MADE_HERE else folder.parent  # the run's own folder, or its sweep's
    outermost = MADE_HERE.get(made)
    if outermost is None or not holds_locks() or not folder.is_dir():
        return False
    if any(entry.name not in BEFORE_TRAINING for entry in folder.iterdir()):
        return False
    release(folder)
    shutil.rmtree(folder, ignore_errors=True)
    if made != folder:
        if any(entry.name != SWEEP_RECORD for entry in made.iterdir()):
            return True  # the sweep's other jobs' folders stay
        shutil.rmtree(made, ignore_errors=True)
    MADE_HERE.pop(made)
    if outermost != made:
        for parent in made.parents:
            try:
                parent.rmdir()  # only while empty: another run's folder beside it keeps it
            except OSError:
                break
            if parent == outermost:
                break
    return True


def live_holder(folder: str | Path) -> str | None:
    """``pid N on HOST`` of the live run that holds ``folder``, or None when no run holds it."""
    folder = Path(folder).resolve()
    if folder in _held:
        return f"{_holder()}, this process"
    try:
        fd = os.open(folder / LOCK_FILE, os.O_RDONLY)
    except OSError:  # no lock file: a run from before locks, or a folder no run started in
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return os.read(fd, 200).decode(errors="replace").strip() or "a live process"
    finally:
        os.close(fd)  # drops the shared lock this probe took, if it took one
    return None


def finished(folder: str | Path) -> dict | None:
    """The ``results.json`` a run wrote when it finished, or None (still running, stopped, crashed)."""
    try:
        return json.loads((Path(folder) / RESULTS_FILE).read_text())
    except (OSError, ValueError):
        return None


def result_text(results: dict) -> str:
    """A finished run's top-1 as its messages quote it."""
    top1 = (results.get("metrics") or {}).get("val/top1")
    return f"top-1 {100 * top1:.2f} %" if isinstance(top1, int | float) else "no top-1 recorded"


def finished_message(folder: Path, results: dict) -> str:
    return (
        f"run.ckpt_path=last: the newest run of this config already finished ({result_text(results)},"
        f" {folder}/{RESULTS_FILE}); nothing to resume: leave out run.ckpt_path to train it again"
    )


def refuse_finished(folder: str | Path, ckpt_path: str | None) -> None:
    """A ``hydra.run.dir`` given on the command line that holds a finished run (its `RESULTS_FILE`): a one-line
    `UserError` before Hydra writes its ``.hydra/`` there, unless this run resumes that run (``run.ckpt_path=last``
    or a checkpoint inside the folder) to train it further; a resume with nothing left to train ends as
    `Finished` in ``resume.resolve_ckpt_path``, before the run writes anything but Hydra's files. A new run there
    would replace its results, resolved config, ``.hydra/`` and last.ckpt and mix two runs' checkpoints and W&B
    runs in one folder. No overwrite switch: deleting the folder is the explicit way to train there again, and it
    keeps nothing by accident."""
    folder = Path(folder).expanduser().resolve()
    results = finished(folder)
    if results is None or str(ckpt_path) == "last":
        return
    if ckpt_path is not None and folder in Path(str(ckpt_path)).expanduser().resolve().parents:
        return
    raise UserError(
        f"hydra.run.dir={folder} holds a finished run ({result_text(results)}, {RESULTS_FILE}, its checkpoints and"
        " config), which a new run would replace: give another hydra.run.dir (or leave it out for a fresh folder),"
        " add run.ckpt_path=last and a later end (trainer.max_steps or trainer.max_epochs) to train that run"
        " further, or delete the folder to train there again"
    )
