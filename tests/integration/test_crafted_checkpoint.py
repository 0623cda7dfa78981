"""A checkpoint from someone else is data, never a program: the real entry point refuses a crafted checkpoint
(a pickle naming ``os.system``, made with torch's own ``torch.save``) in one line naming the file and what it
holds, exit 2, and the command in it never runs: a single file and a distributed checkpoint (a folder of
torch.distributed.checkpoint shards plus Lightning's ``meta.pt``), named by ``run.ckpt_path=<file>`` or found as
the newest by ``run.ckpt_path=last``. And a run whose model hyperparameters hold a mapping (``model_kwargs``)
resumes under the data-only load."""

from __future__ import annotations

import os
import pickle
import warnings
from pathlib import Path

import helpers
import pytest
import torch
import torch.distributed.checkpoint as dcp
from helpers import assert_one_line_error
from resume_runs import env, make_demo_data

pytestmark = pytest.mark.slow
REFUSED = "holds `posix.system`: not loaded; a checkpoint is loaded as data only"


class Evil:
    """Unpickled, it runs ``touch <marker>``."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def crafted_file(path: Path, marker: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"epoch": 0, "global_step": 1, "state_dict": {}, "loops": {}, "x": Evil(marker)}, path)
    return path


def crafted_folder(path: Path, marker: Path, poisoned: str) -> Path:
    """Real shards (torch.distributed.checkpoint.save) with ``poisoned`` replaced: Lightning's ``meta.pt``
    (torch.save) or the shards' ``.metadata`` index (a pickle, as torch writes it)."""
    state = {"state_dict": {"w": torch.ones(3)}, "optimizer_0": {"param_groups": [{"lr": 0.1}]}}
    with warnings.catch_warnings():  # "assuming the intent is to save in a single process": it is
        warnings.simplefilter("ignore")
        dcp.save(state, checkpoint_id=path)
    torch.save({"epoch": 0, "global_step": 1, "loops": {}}, path / "meta.pt")
    if poisoned == "meta.pt":
        torch.save({"epoch": 0, "global_step": 1, "loops": {}, "x": Evil(marker)}, path / "meta.pt")
    else:
        with open(path / poisoned, "wb") as file:
            pickle.dump(Evil(marker), file)
    return path


def train(shared_runs: Path, tmp_path: Path, *args: str):
    command = [*helpers.TRAIN, "recipe=demo", "debug=toy", f"paths.log_dir={tmp_path / 'logs'}", *args]
    return helpers.run(command, env=env(shared_runs), timeout=600)


@pytest.mark.parametrize("kind", ["file", "meta.pt", ".metadata"])
def test_a_crafted_checkpoint_named_by_path_is_refused_and_never_runs(shared_runs, tmp_path, kind):
    make_demo_data(shared_runs)
    marker = tmp_path / "MARKER"
    path = tmp_path / "shared" / "last.ckpt"
    if kind == "file":
        crafted_file(path, marker)
    else:
        crafted_folder(path, marker, kind)
    poisoned = path if kind == "file" else path / kind
    done = train(shared_runs, tmp_path, f"run.ckpt_path={path}")
    assert not marker.exists(), "the checkpoint's command ran"
    line = assert_one_line_error(done, str(poisoned), REFUSED, alone=False)
    assert line.startswith(f"error: checkpoint {poisoned} holds"), line
    assert path.exists()  # refused, not removed: the user decides what to do with it


@pytest.mark.parametrize("kind", ["file", "meta.pt"])
def test_a_crafted_checkpoint_newest_in_a_run_folder_is_refused_on_last(shared_runs, tmp_path, kind):
    """``last`` in an earlier run folder of the recipe (a cluster folder others can write), and in the run's
    own pinned folder: the crafted checkpoint is the newest, refused, never skipped to start afresh."""
    make_demo_data(shared_runs)
    marker = tmp_path / "MARKER"
    earlier = tmp_path / "logs" / "demo" / "runs" / "earlier" / "checkpoints" / "epoch9-step99.ckpt"
    own = tmp_path / "run" / "checkpoints" / "epoch9-step99.ckpt"
    for path, args in ((earlier, []), (own, [f"hydra.run.dir={tmp_path / 'run'}"])):
        if kind == "file":
            crafted_file(path, marker)
        else:
            crafted_folder(path, marker, kind)
        poisoned = path if kind == "file" else path / kind
        done = train(shared_runs, tmp_path, "run.ckpt_path=last", *args)
        assert not marker.exists(), "the checkpoint's command ran"
        assert_one_line_error(done, str(poisoned), REFUSED, alone=False)
        assert path.exists()


def test_a_run_with_model_kwargs_resumes(shared_runs, tmp_path):
    """Hydra hands a mapping in the config to the model as a DictConfig; saved as a hyperparameter it made every
    checkpoint of such a run unloadable as data. Stopped after 2 of 3 steps, the run resumes and ends."""
    make_demo_data(shared_runs)
    kwargs = "+model.model_kwargs.drop_rate=0.1"
    first = tmp_path / "first"
    done = train(shared_runs, tmp_path, kwargs, "trainer.max_steps=2", f"hydra.run.dir={first}")
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    saved = torch.load(first / "checkpoints" / "last.ckpt", weights_only=True)
    assert saved["global_step"] == 2 and saved["hyper_parameters"]["model_kwargs"] == {"drop_rate": 0.1}

    resumed = tmp_path / "resumed"
    ckpt = first / "checkpoints" / "last.ckpt"
    done = train(shared_runs, tmp_path, kwargs, f"run.ckpt_path={ckpt}", f"hydra.run.dir={resumed}")
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-3000:]
    assert "Restoring states from the checkpoint path at" in output
    assert torch.load(resumed / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] == 3
