"""Checkpoints are read as data, never run: a checkpoint from someone else can hold no code that runs on reading.

- `load`: ``torch.load(weights_only=True)``, torch's restricted unpickler (tensors, plain Python types, the
  few torch types it allows itself). Our checkpoints need nothing more: RNG states are stored as tensors and
  tuples (`lightning_lars.runtime.rank_state`), hyperparameters and the optimizers' settings as plain dicts and
  text (`lightning_lars.config.schema.plain`), so no name is added to torch's allowlist. A file whose pickle
  names anything else (``os.system``, a class of someone's) raises `UnsafeCheckpoint`, which names it.
- `check_distributed`: a directory of torch.distributed.checkpoint shards (``save_distributed_checkpoint``).
  torch's reader (2.11 to 2.14, no option to change it) unpickles its ``.metadata`` with plain ``pickle.load``
  and every non-tensor entry (optimizer settings) with ``torch.load(weights_only=False)``: both are checked here
  before Lightning reads them, ``.metadata`` by a restricted unpickler that rebuilds only `SHARD_INDEX` names,
  the entries with `load`.

Here rather than in ``runtime`` because the FSDP strategies load through it. Imports torch and ``core``.
"""

from __future__ import annotations

import contextlib
import io
import pickle
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from lightning_lars.core.errors import UserError

SHARD_INDEX_FILE = ".metadata"  # torch.distributed.checkpoint's index of the shards
# What torch.distributed.checkpoint pickles into ``.metadata`` (the index: which bytes of which ``.distcp``
# file hold which tensor slice). Each is rebuilt by a lookup or by filling in fields, never by running code
# the file chooses: dataclasses (NEWOBJ + BUILD sets their fields), enum members and dtypes (looked up by
# value or name), ``torch.Size`` (a tuple), a path (a path object, no I/O) and torch's layout lookup by name.
_DCP = "torch.distributed.checkpoint"
# the tensors' element types, named as torch pickles them (torch.float32 is a value, not a call)
_DTYPES = (
    *("float16", "bfloat16", "float32", "float64", "complex64", "complex128", "bool"),
    *("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"),
    *("float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz"),
)
SHARD_INDEX = frozenset(
    {
        f"{_DCP}.metadata.Metadata",  # the index itself
        f"{_DCP}.metadata.MetadataIndex",  # (name, offset, index) key of an entry
        f"{_DCP}.metadata.TensorStorageMetadata",  # a tensor's dtype, size and chunks
        f"{_DCP}.metadata.TensorProperties",  # dtype, layout, memory format of a tensor
        f"{_DCP}.metadata.ChunkStorageMetadata",  # offsets and sizes of one chunk
        f"{_DCP}.metadata.BytesStorageMetadata",  # marks a non-tensor entry (checked with `load`)
        f"{_DCP}.metadata.StorageMeta",  # checkpoint id and save id
        f"{_DCP}.metadata._MEM_FORMAT_ENCODING",  # an Enum: member looked up by value
        f"{_DCP}.filesystem._StorageInfo",  # file name, offset, length of an entry
        "torch.serialization._get_layout",  # torch.strided & co. looked up by name
        "torch.Size",  # a tuple of ints
        "pathlib.PosixPath",  # the checkpoint id: a path object (pathlib._local on Python 3.13+)
        "pathlib._local.PosixPath",
        *(f"torch.{name}" for name in _DTYPES if isinstance(getattr(torch, name, None), torch.dtype)),
    }
)


class UnsafeCheckpoint(UserError):
    """A checkpoint whose pickle names a global outside the allowlist: refused before anything is built."""

    def __init__(self, path: str | Path, names: list[str]):
        held = ", ".join(sorted(set(names))) or "a type outside the allowlist"
        super().__init__(
            f"checkpoint {path} holds `{held}`: not loaded; a checkpoint is loaded as data only (resume from"
            " a checkpoint lightning-lars wrote, or leave out run.ckpt_path to start afresh)"
        )


def load(path: str | Path | io.BytesIO, shown_as: str | Path | None = None, **kwargs: Any) -> Any:
    """``torch.load(path, weights_only=True, **kwargs)``; `UnsafeCheckpoint` for a pickle that names a global
    torch does not allow (named by ``shown_as`` in the message, the path by default)."""
    with data_only(path, shown_as):
        return torch.load(path, weights_only=True, **kwargs)


@contextlib.contextmanager
def data_only(path: str | Path | io.BytesIO, shown_as: str | Path | None = None) -> Iterator[None]:
    """Turns torch's refusal of a global under ``weights_only=True`` into `UnsafeCheckpoint` naming the file
    (``shown_as``, else ``path``); any other failure (a damaged file) goes on as it was raised."""
    try:
        yield
    except pickle.UnpicklingError as error:
        names = unsafe_globals(path, error)
        if not names:
            raise  # damaged, or refused for another reason: the caller's to report
        raise UnsafeCheckpoint(shown_as or path, names) from None


def unsafe_globals(path: str | Path | io.BytesIO, error: Exception) -> list[str]:
    """The globals outside the allowlist: from the pickle's opcodes (torch reads them without running
    anything), else from torch's message ("GLOBAL posix.system"), which names the one it stopped at."""
    try:
        if isinstance(path, io.BytesIO):
            path.seek(0)
        names = torch.serialization.get_unsafe_globals_in_checkpoint(path)
    except Exception:  # noqa: BLE001 - not a zip, a damaged record: the message is all there is
        names = []
    return names or re.findall(r"GLOBAL ([\w.]+)", str(error))


def check(path: str | Path) -> None:
    """Raises `UnsafeCheckpoint` for a checkpoint file or shard directory that holds anything but data, ahead
    of a reader that does not restrict itself: torch's shard reader (see the module docstring) and Lightning's
    FSDP1 reader of a whole file (a plain ``pickle.Unpickler`` that ignores ``weights_only``)."""
    if Path(path).is_dir():
        check_distributed(Path(path))
    else:
        load(path, map_location="cpu", mmap=True)  # tensors memory-mapped: read, not copied


class _ShardIndexUnpickler(pickle.Unpickler):
    """Python's documented way to restrict unpickling: every global the pickle names goes through here."""

    def find_class(self, module: str, name: str) -> Any:
        if f"{module}.{name}" not in SHARD_INDEX:
            raise UnsafeGlobal(f"{module}.{name}")
        return super().find_class(module, name)


class UnsafeGlobal(pickle.UnpicklingError):
    """A global outside `SHARD_INDEX`, named in ``args[0]``."""


def check_distributed(path: Path) -> None:
    """Raises `UnsafeCheckpoint` if the shard directory ``path`` holds anything but data: its ``.metadata`` is
    unpickled here with `SHARD_INDEX` only, and each non-tensor entry it points to is read with `load`.
    Damage (a truncated file) raises what reading it raises."""
    index_file = path / SHARD_INDEX_FILE
    with open(index_file, "rb") as file:
        try:
            index = _ShardIndexUnpickler(file).load()
        except UnsafeGlobal as error:
            raise UnsafeCheckpoint(index_file, [error.args[0]]) from None
    entries = getattr(index, "storage_data", None)
    if not isinstance(entries, dict):
        raise pickle.UnpicklingError(f"{index_file}: not a torch.distributed.checkpoint index")
    byte_entries = {
        key
        for key, meta in getattr(index, "state_dict_metadata", {}).items()
        if type(meta).__name__ == "BytesStorageMetadata"
    }
    for key, where in entries.items():
        if getattr(key, "fqn", None) not in byte_entries:
            continue  # a tensor slice: torch's reader loads those with weights_only=True itself
        shard = path / where.relative_path
        with open(shard, "rb") as file:
            file.seek(where.offset)
            data = io.BytesIO(file.read(where.length))
        if getattr(where, "transform_descriptors", None):  # compressed or encoded: not a torch.save record
            raise UnsafeCheckpoint(shard, [f"an encoded entry ({', '.join(where.transform_descriptors)})"])
        load(data, shown_as=f"{shard} (entry {key.fqn})", map_location="cpu")
