"""Bad input gives one clear line (exit code 2, no traceback) or a counted warning, and
nothing is lost: unknown recipe or key, missing or truncated dataset, devices that do not divide the global
batch, a missing or damaged checkpoint, bad ImageFolder trees for `prepare`, and a disk that fills up while
a checkpoint is written (the previous checkpoint stays valid and the run resumes from it exactly)."""

from __future__ import annotations

import builtins
import errno
import logging
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import assert_one_line_error
from hydra.core.global_hydra import GlobalHydra
from PIL import Image
from resume_runs import (
    OVERRIDES,
    ROOT,
    assert_same_training,
    entry_point,
    env,
    make_demo_data,
    reference_run,
)

from lightning_lars.config.jobs import compose_job
from lightning_lars.runtime import checkpoint_io, resume
from lightning_lars.training.run import run

pytestmark = pytest.mark.slow


@pytest.mark.parametrize(
    "args, phrases",
    [
        (["recipe=goyal8k"], ["unknown recipe 'goyal8k'", "goyal_8k", "make recipes"]),
        (  # Lightning's own Trainer(...) refuses it, before W&B opens; every config mistake: test_schema.py
            ["data=synthetic", "+trainer.max_epoch=3"],  # data on no disk: the Trainer is built
            ["unknown config key 'trainer.max_epoch'", "Trainer takes no such argument"],
        ),
        (
            ["paths.data_dir=/nonexistent/data"],
            ["/nonexistent/data/demo/train.beton not found", "make demo-data"],
        ),
        (  # a path of the user's own: the demo's command would never fill it
            ["data.train_path=/nonexistent/mine/train.beton"],
            ["make prepare src=<imagefolder> out=/nonexistent/mine"],
        ),
        (
            ["data=demo_imagefolder", "data.root=/nonexistent/mine"],
            ["expected /nonexistent/mine/train/<class>"],
        ),
        (  # 97 is prime: under 64 per device only 97 x 1 image, and BN over 1 image raises mid-run
            ["batch.global_size=97", "batch.max_per_device=64"],
            ["BN over 1 image cannot train", "set batch.global_size to 96 or 98"],
        ),
        (
            ["batch.global_size=97", "batch.max_per_device=64", "batch.bn_group=16"],
            ["bn_group=16", "set batch.global_size to 96 or 112"],
        ),
        (["scheduler.base_lr=-0.1"], ["scheduler.base_lr=-0.1", "must be > 0"]),
        (["scheduler.base_lr=0"], ["scheduler.base_lr=0", "must be > 0"]),
        (["optimizer.momentum=1.0"], ["optimizer.momentum=1.0", "[0, 1)"]),
        (["optimizer.momentum=-0.5"], ["optimizer.momentum=-0.5", "[0, 1)"]),
        (
            ["data=synthetic", "trainer.devices=0"],
            ["trainer.devices=0", "should be an int > 0"],
        ),  # Lightning's
    ],
)
def test_mistakes_before_training_are_one_line(args, phrases, tmp_path):
    line = assert_one_line_error(entry_point(*args, tmp=tmp_path), *phrases)
    assert "max_per_device to" not in line  # never the advice to raise a cap that is not what stops the plan
    assert not (tmp_path / "logs").exists()  # refused before training: the run folder Hydra made is discarded


@pytest.mark.parametrize(
    "override, source",
    [
        ("+optimizer.lr=0.1", "scheduler.base_lr"),  # Hydra's + would add it, and the schedule overwrite it
        ("optimizer.lr=-0.1", "scheduler.base_lr"),  # once answered with the advice to add that +
        ("++optimizer.lr=0.1", "scheduler.base_lr"),
        ("+data.batch_size=48", "batch.global_size"),
        ("trainer.accumulate_grad_batches=4", "batch.global_size"),  # a Trainer argument: once given its +
    ],
)
def test_a_key_the_run_sets_itself_is_refused_naming_the_key_that_sets_it(override, source, tmp_path):
    key = override.lstrip("+").partition("=")[0]
    line = assert_one_line_error(
        entry_point("recipe=goyal_8k", override, tmp=tmp_path), f"{key} is not read", f"set {source} instead"
    )
    assert "+" not in line  # no advice to add it
    assert not (tmp_path / "logs").exists()


def test_a_users_recipe_that_sets_the_optimizers_lr_is_refused(tmp_path):
    conf = tmp_path / "conf"
    (conf / "recipe").mkdir(parents=True)
    (conf / "recipe" / "mine.yaml").write_text(
        "# @package _global_\ndefaults: [goyal_8k]\noptimizer: {lr: 0.2}\n"
    )
    line = assert_one_line_error(
        entry_point("recipe=mine", f"hydra.searchpath=[file://{conf}]", tmp=tmp_path),
        "optimizer.lr is not read",
        "set scheduler.base_lr instead",
    )
    assert "+" not in line


def test_truncated_dataset_and_missing_or_damaged_checkpoint_are_one_line(shared_runs, tmp_path):
    make_demo_data(shared_runs)
    (tmp_path / "data" / "demo").mkdir(parents=True)
    whole = (shared_runs / "data" / "demo" / "train.beton").read_bytes()
    (tmp_path / "data" / "demo" / "train.beton").write_bytes(whole[: len(whole) // 2])  # a copy that died
    (tmp_path / "data" / "demo" / "val.beton").write_bytes(
        (shared_runs / "data" / "demo" / "val.beton").read_bytes()
    )
    # $LARS_DATA_DIR is the user's own folder: the command named must write there, not to data/demo
    assert_one_line_error(
        entry_point(tmp=tmp_path),
        "train.beton is truncated or not an FFCV file",
        f"make demo-data out={tmp_path / 'data' / 'demo'}",
    )

    damaged = tmp_path / "epoch0-step4.ckpt"
    damaged.write_bytes(b"PK\x03\x04" + os.urandom(3000))  # starts like a zip, ends nowhere
    assert_one_line_error(
        entry_point(f"run.ckpt_path={damaged}", tmp=shared_runs), "damaged or not a checkpoint"
    )
    assert_one_line_error(
        entry_point("run.ckpt_path=/nonexistent/last.ckpt", tmp=shared_runs),
        "checkpoint /nonexistent/last.ckpt not found",
        "run.ckpt_path=last",
    )


def test_global_batch_that_does_not_divide_across_devices(shared_runs, tmp_path):
    make_demo_data(shared_runs)
    done = entry_point(
        "batch.global_size=30", "trainer.devices=4", "trainer.accelerator=cpu", tmp=shared_runs
    )
    assert done.returncode == 2 and "Traceback" not in done.stdout + done.stderr
    errors = [ln for ln in done.stderr.splitlines() if ln.startswith("error:")]
    # Lightning's start-up notices may precede it (the device count needs the Trainer); the error ends the run
    assert errors == [done.stderr.strip().splitlines()[-1]]
    assert "global batch 30 does not divide across 4 devices" in errors[0]


def test_prepare_counts_bad_files_and_fails_one_line_on_a_wrong_path(tmp_path):
    src = tmp_path / "imagenet"
    for split in ("train", "val"):
        for name in ("cat", "dog"):
            (src / split / name).mkdir(parents=True)
            Image.new("RGB", (20, 16), (200, 30, 30)).save(src / split / name / "ok.JPEG")
    (src / "train" / "cat" / "cut.JPEG").write_bytes((src / "train" / "cat" / "ok.JPEG").read_bytes()[:60])
    (src / "train" / "dog" / "notes.txt").write_text("not an image")
    (src / "train" / "empty").mkdir()
    prepare = [sys.executable, "-m", "lightning_lars.data.prepare"]
    done = subprocess.run(
        [*prepare, "--src", str(src), "--out", str(tmp_path / "out")],
        cwd=ROOT,
        env=env(tmp_path),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert (
        "skipped 2 entries (each with its reason)" in done.stderr
        and "1 empty class folder(s): empty" in done.stderr
    )
    assert "Traceback" not in done.stdout + done.stderr
    wrong = subprocess.run(
        [*prepare, "--src", str(tmp_path / "imagnet"), "--out", str(tmp_path / "out2")],
        cwd=ROOT,
        env=env(tmp_path),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert_one_line_error(wrong, str(tmp_path / "imagnet"))


def test_make_prepare_on_a_full_disk_is_one_line_naming_the_space_needed(tmp_path):
    """A real full disk: a 3 MiB tmpfs mounted in a mount namespace of its own (``unshare``; as root or in an
    unprivileged user namespace), gone when the command ends. The conversion to a roomy folder is the oracle for
    the space the files need."""
    if subprocess.run(["unshare", "--mount", "--map-root-user", "true"], check=False).returncode:
        pytest.skip("needs a mount namespace (unshare --mount --map-root-user) for a small tmpfs")
    src = tmp_path / "my images"  # spaces in both paths: make passes them whole
    noise = np.random.default_rng(0)
    for split, count in (("train", 150), ("val", 30)):
        for name in ("cat", "dog"):
            (src / split / name).mkdir(parents=True)
            for i in range(count):
                pixels = noise.integers(0, 256, (64, 64, 3), dtype=np.uint8)
                Image.fromarray(pixels).save(src / split / name / f"{i}.JPEG")
    make = ["make", "--no-print-directory", "-C", str(ROOT), "-o", ".venv/.installed", f"PY={sys.executable}"]
    args = "args=--workers 1 --no-progress"
    roomy = tmp_path / "roomy out"
    made = subprocess.run(
        [*make, "prepare", f"src={src}", f"out={roomy}", args],
        env=env(tmp_path),
        capture_output=True,
        text=True,
    )
    assert made.returncode == 0, made.stderr[-3000:]
    needed = sum(path.stat().st_size for path in roomy.iterdir())
    small = tmp_path / "small disk"
    small.mkdir()
    out = small / "imagenet ffcv"
    script = (
        'mount -t tmpfs -o size=3m tmpfs "$1" && mkdir "$1/imagenet ffcv" && printf old > "$2/train.beton" &&'
        ' shift 2 && "$@"; echo "exit $?"; ls -A "$0/imagenet ffcv"; cat "$0/imagenet ffcv/train.beton"'
    )
    done = subprocess.run(
        ["unshare", "--mount", "--map-root-user", "sh", "-c", script, str(small), str(small), str(out)]
        + [*make, "prepare", f"src={src}", f"out={out}", args],
        env=env(tmp_path),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert "Traceback" not in done.stdout + done.stderr, done.stderr[-3000:]
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "no space left on the disk of --out" in errors[0], done.stderr[-3000:]
    mib = int(errors[0].partition("need about ")[2].split()[0].replace(",", ""))
    assert needed <= mib * 2**20 <= 3 * needed, (needed, errors[0])  # enough, and not wildly more
    assert "exit 2" in done.stdout and done.stdout.split("exit 2")[1].split() == ["train.beton", "old"]


class FullDiskAfter:
    """``open`` for the checkpoint writer: the first ``files`` files are written, then every write hits ENOSPC
    after ``budget`` bytes (a partial file lands first, as on a real disk)."""

    def __init__(self, files: int, budget: int = 4096):
        self.files, self.budget = files, budget

    def __call__(self, path, mode="r", *args, **kwargs):
        self.files -= 1
        handle = builtins.open(path, mode, *args, **kwargs)  # noqa: SIM115 -- closed by the caller's with
        if self.files >= 0:
            return handle
        budget = self.budget

        class Full:
            def write(self, data):
                nonlocal budget
                if len(data) > budget:
                    handle.write(bytes(data[:budget]))
                    budget = 0
                    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
                budget -= len(data)
                return handle.write(data)

            def __getattr__(self, name):
                return getattr(handle, name)

            def __enter__(self):
                return self

            def __exit__(self, *exc):
                handle.close()

        return Full()


def run_in_process(shared_runs: Path, run_dir: Path, *extra: str) -> dict:
    GlobalHydra.instance().clear()
    cfg = compose_job(
        [
            *OVERRIDES,
            f"paths.data_dir={shared_runs / 'data'}",
            f"paths.log_dir={run_dir.parent / 'logs'}",
            f"paths.output_dir={run_dir}",
            *extra,
        ]
    )
    return run(cfg)


@pytest.fixture
def deterministic_off_afterwards():
    yield
    torch.use_deterministic_algorithms(False)  # trainer.deterministic=true sets it for the whole process


def test_disk_full_while_checkpointing_keeps_previous_checkpoint_and_resume_is_exact(
    shared_runs, tmp_path, monkeypatch, caplog, deterministic_off_afterwards
):
    reference = reference_run(shared_runs)
    run_dir = tmp_path / "run"
    # step 4 writes epoch0-step4.ckpt and last.ckpt; then the disk is full for the saves at steps 8 and 12
    monkeypatch.setattr(checkpoint_io, "open", FullDiskAfter(files=2), raising=False)
    with caplog.at_level(logging.WARNING, logger="lightning_lars.runtime.checkpoint_io"):
        metrics = run_in_process(shared_runs, run_dir)
    assert "val/top1" in metrics  # the run went on to the end
    failures = [r.getMessage() for r in caplog.records if "NOT written" in r.getMessage()]
    assert len(failures) >= 2 and all("No space left on device" in f and "\n" not in f for f in failures)
    assert f"({len(failures)} failed checkpoint writes in this run)" in failures[-1]
    kept = sorted(p.name for p in (run_dir / "checkpoints").iterdir())
    assert kept == ["epoch0-step4.ckpt", "last.ckpt"]  # no partial file, no deleted predecessor
    assert resume.load_meta(run_dir / "checkpoints" / "last.ckpt")["global_step"] == 4

    monkeypatch.undo()  # disk space freed; the user resumes from the newest good checkpoint
    (run_dir / "final.pt").unlink()
    run_in_process(shared_runs, run_dir, "run.ckpt_path=last")
    assert_same_training(torch.load(run_dir / "final.pt", weights_only=False), reference)
