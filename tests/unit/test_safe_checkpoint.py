"""A checkpoint is read as data only: a pickle naming ``os.system`` is refused, naming itself, before anything
runs, through every reader we and Lightning use (our meta read, AtomicCheckpointIO, the FSDP strategies' loads,
a torch.distributed.checkpoint folder's index and entries). The crafted files are made with torch's own
``torch.save``, ``pickle.dump`` and ``torch.distributed.checkpoint.save``; seconds on CPU."""

from __future__ import annotations

import os
import pickle
import warnings
from pathlib import Path

import pytest
import torch
import torch.distributed.checkpoint as dcp

from lightning_lars.parallel import safe_checkpoint
from lightning_lars.parallel.fsdp import load_data_only
from lightning_lars.parallel.safe_checkpoint import UnsafeCheckpoint
from lightning_lars.runtime import resume
from lightning_lars.runtime.checkpoint_io import AtomicCheckpointIO


class Evil:
    """Unpickled, it runs ``touch <marker>``: what a crafted checkpoint would do on a plain ``torch.load``."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def checkpoint(payload) -> dict:
    """A dict with the keys `resume.load_meta` asks for, so only the payload can make it fail."""
    return {"epoch": 0, "global_step": 1, "state_dict": {"w": torch.ones(2)}, "loops": {}, "x": payload}


def save_shards(folder: Path, state: dict) -> Path:
    with warnings.catch_warnings():  # "assuming the intent is to save in a single process": it is
        warnings.simplefilter("ignore")
        dcp.save(state, checkpoint_id=folder)
    return folder


def shard_state(lr) -> dict:
    """Weights and an optimizer's settings, as Lightning's ModelParallelStrategy saves them (the settings are
    the non-tensor entries torch's reader unpickles itself)."""
    return {
        "state_dict": {"w": torch.arange(6.0).reshape(3, 2)},
        "optimizer_0": {"param_groups": [{"lr": lr}]},
    }


def test_a_file_naming_os_system_is_refused_by_name_and_nothing_runs(tmp_path):
    marker = tmp_path / "MARKER"
    path = tmp_path / "evil.ckpt"
    torch.save(checkpoint(Evil(marker)), path)
    with pytest.raises(UnsafeCheckpoint) as refused:
        resume.load_meta(path)
    line = str(refused.value)
    assert f"checkpoint {path} holds `posix.system`: not loaded; a checkpoint is loaded as data only" in line
    assert "\n" not in line
    with pytest.raises(UnsafeCheckpoint, match="posix.system"):  # Lightning's reader, even asked for False
        AtomicCheckpointIO().load_checkpoint(path, weights_only=False)
    assert not marker.exists()
    torch.load(path, weights_only=False)  # the oracle: torch's unrestricted load does run it
    assert marker.exists()


def test_a_newest_crafted_file_is_refused_not_skipped_for_an_older_good_one(tmp_path):
    good = tmp_path / "epoch0-step1.ckpt"
    torch.save(checkpoint(None), good)
    os.utime(good, ns=(1_000_000_000, 1_000_000_000))
    torch.save(checkpoint(Evil(tmp_path / "MARKER")), tmp_path / "epoch0-step2.ckpt")
    assert resume.candidates(tmp_path)[0].name == "epoch0-step2.ckpt"
    with pytest.raises(UnsafeCheckpoint, match="epoch0-step2.ckpt holds `posix.system`"):
        resume.newest_good([tmp_path])
    assert not (tmp_path / "MARKER").exists()


def test_our_checkpoints_and_lightning_s_io_still_load(tmp_path):
    path = tmp_path / "a.ckpt"
    torch.save(checkpoint({"rng": (3, (1, 2), None), "form": "you2017"}), path)
    assert resume.load_meta(path)["x"]["form"] == "you2017"
    loaded = AtomicCheckpointIO().load_checkpoint(path)
    assert torch.equal(loaded["state_dict"]["w"], torch.ones(2))


def test_a_shard_folder_is_checked_index_entries_and_meta(tmp_path):
    marker = tmp_path / "MARKER"
    good = save_shards(tmp_path / "good.ckpt", shard_state(0.1))
    safe_checkpoint.check_distributed(good)  # torch's own index and entries of a real save: data
    torch.save({"global_step": 1, "loops": {}}, good / resume.SHARDED_META)
    assert resume.load_meta(good)["global_step"] == 1

    # a non-tensor entry (torch's reader: torch.load(weights_only=False)) that runs code
    entry = save_shards(tmp_path / "entry.ckpt", shard_state(Evil(marker)))
    torch.save({"global_step": 1, "loops": {}}, entry / resume.SHARDED_META)
    with pytest.raises(UnsafeCheckpoint, match=r"__0_0.distcp \(entry optimizer_0.param_groups.0.lr\) holds"):
        resume.load_meta(entry)

    # the index itself (torch's reader: plain pickle.load)
    index = save_shards(tmp_path / "index.ckpt", shard_state(0.1))
    torch.save({"global_step": 1, "loops": {}}, index / resume.SHARDED_META)
    with open(index / safe_checkpoint.SHARD_INDEX_FILE, "wb") as file:
        pickle.dump(Evil(marker), file)
    with pytest.raises(UnsafeCheckpoint, match=r"\.metadata holds `posix.system`"):
        resume.load_meta(index)

    # Lightning's meta.pt, written with torch.save
    meta = save_shards(tmp_path / "meta.ckpt", shard_state(0.1))
    torch.save(checkpoint(Evil(marker)), meta / resume.SHARDED_META)
    with pytest.raises(UnsafeCheckpoint, match=r"meta.pt holds `posix.system`"):
        resume.load_meta(meta)
    assert not marker.exists()


def test_the_fsdp_strategies_check_before_lightning_reads_and_ask_for_weights_only(tmp_path):
    marker = tmp_path / "MARKER"
    calls = []

    def lightning_load(path, weights_only=None):  # stands for ModelParallelStrategy/FSDPStrategy's load
        calls.append(weights_only)
        return torch.load(path / resume.SHARDED_META if path.is_dir() else path, weights_only=weights_only)

    folder = save_shards(tmp_path / "shards.ckpt", shard_state(Evil(marker)))
    torch.save({"global_step": 1, "loops": {}}, folder / resume.SHARDED_META)
    whole = tmp_path / "whole.ckpt"  # FSDP1 reads a whole file with a plain unpickler
    torch.save(checkpoint(Evil(marker)), whole)
    for path in (folder, whole):
        with pytest.raises(UnsafeCheckpoint):
            load_data_only(lightning_load, path)
    assert calls == [] and not marker.exists()

    good = save_shards(tmp_path / "good.ckpt", shard_state(0.1))
    torch.save({"global_step": 3, "loops": {}}, good / resume.SHARDED_META)
    assert load_data_only(lightning_load, good)["global_step"] == 3
    assert calls == [True]
