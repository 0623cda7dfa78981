"""Checkpoint files that are never half written: `AtomicCheckpointIO`, Lightning's CheckpointIO plugin for it.

It writes ``.<name>.tmp-<pid>`` beside the target, fsyncs it, then ``os.replace``s it over the target. A failed
write (ENOSPC, EIO, quota) removes the temp file, leaves the previous checkpoint as it was and says so in one
counted warning; training goes on. Lightning's own ``_atomic_save`` stages the file in ``/tmp`` and moves it
with ``shutil.move``, which is a copy onto the target (not atomic, no fsync) whenever ``/tmp`` and the run dir
are different file systems, as on most clusters.

Loads go through `lightning_lars.parallel.safe_checkpoint`: data only, whatever Lightning passes.

Imports: torch, Lightning and `lightning_lars.parallel.safe_checkpoint` (a leaf of `lightning_lars.runtime`).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.plugins.io import TorchCheckpointIO

from lightning_lars.parallel import safe_checkpoint

log = logging.getLogger(__name__)


class AtomicCheckpointIO(TorchCheckpointIO):
    """``torch.save`` into a temp file in the target's folder + fsync + ``os.replace``: a reader sees the old
    checkpoint or the new one, never a partial file, even if the process dies or the disk fills mid-write."""

    def __init__(self) -> None:
        self.num_failed_writes = 0
        self.last_error: OSError | None = None

    def save_checkpoint(self, checkpoint: dict[str, Any], path, storage_options: Any | None = None) -> None:
        if "://" in str(path):  # object stores (s3://, gs://) have no rename; fsspec's transaction is theirs
            return super().save_checkpoint(checkpoint, path, storage_options)
        if storage_options is not None:
            raise TypeError(f"{type(self).__name__} takes no storage_options")
        target = Path(path)
        temp = target.with_name(f".{target.name}.tmp-{os.getpid()}")
        writer = None
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            with open(temp, "wb") as raw:
                writer = _KeepsWriteError(raw)
                torch.save(checkpoint, writer)
                raw.flush()
                os.fsync(raw.fileno())  # the bytes are on disk before the name points at them
            os.replace(temp, target)
            _fsync_dir(target.parent)  # ... and the new name survives a power cut
        except (OSError, RuntimeError) as error:
            temp.unlink(missing_ok=True)
            # torch's zip writer turns a failed write into "RuntimeError: unexpected pos ...": keep the OSError
            cause = writer.error if writer is not None and writer.error is not None else error
            self.num_failed_writes += 1
            self.last_error = cause if isinstance(cause, OSError) else OSError(one_line(cause))
            log.warning(
                f"checkpoint {target} NOT written ({one_line(cause)}); earlier checkpoints are untouched"
                f" ({self.num_failed_writes} failed checkpoint writes in this run); free disk space:"
                " training goes on and the next save tries again"
            )

    def load_checkpoint(
        self, path, *args: Any, weights_only: bool | None = None, **kwargs: Any
    ) -> dict[str, Any]:
        """Lightning's load, always with ``weights_only=True`` (``None``, its default, leaves the choice to torch
        and to ``TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD``): a checkpoint is data; one naming other globals raises
        `UnsafeCheckpoint`."""
        with safe_checkpoint.data_only(path):
            return super().load_checkpoint(path, *args, weights_only=True, **kwargs)


class _KeepsWriteError:
    """A binary file for ``torch.save`` that remembers the OSError (ENOSPC, EIO) of a failed ``write``."""

    def __init__(self, raw):
        self.raw, self.error = raw, None

    def write(self, data) -> int:
        try:
            return self.raw.write(data)
        except OSError as error:
            self.error = error
            raise

    def flush(self) -> None:
        self.raw.flush()


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    except OSError:  # some file systems (e.g. some network mounts) refuse fsync on a directory: best effort
        pass
    finally:
        os.close(fd)


def one_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return text[0] if text else type(error).__name__


def checkpoint_io(trainer: L.Trainer) -> AtomicCheckpointIO | None:
    io = trainer.strategy.checkpoint_io
    return io if isinstance(io, AtomicCheckpointIO) else None
