"""A new user's first hour, through the real entry points (``python -m lightning_lars.train``,
``make``, ``python -m lightning_lars.data.prepare``): mistakes that need the heavy stack are one line (exit 2,
no traceback, no empty W&B run); Ctrl-C checkpoints and prints the command that resumes; the printed command
resumes into the same checkpoint folder, with step and epoch checkpoints together and the final state saved;
``run.ckpt_path=last`` refuses a run of another config; prepare's workers die with it on ``kill -9``."""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import MAKE, ROOT, TRAIN, assert_one_line_error, entry_point_env, run
from PIL import Image

from lightning_lars.data.beton_header import read_num_samples
from lightning_lars.runtime import resume

pytestmark = pytest.mark.slow
ENV = entry_point_env()
# the size of the data_dir fixture's demo dataset: 160 train / 80 val images
DEMO_ARGS = ["--train-per-class", "16", "--val-per-class", "8", "--workers", "1"]
PREPARE = [sys.executable, "-m", "lightning_lars.data.prepare"]


def start_training(args: list[str]) -> subprocess.Popen:
    """``python -m lightning_lars.train ARGS`` started from the checkout, its stdout and stderr piped as text."""
    return subprocess.Popen(
        [*TRAIN, *args], cwd=ROOT, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


ACCELERATOR = "tpu" if torch.cuda.is_available() else "gpu"  # one this machine does not have


@pytest.mark.parametrize(
    "override, phrases",
    [
        ("model.arch=resnet5O", ["model.arch=resnet5O: timm has no such model", "resnet50"]),
        (
            f"trainer.accelerator={ACCELERATOR}",
            [f"trainer.accelerator={ACCELERATOR}, but this machine has no", "trainer.accelerator=auto"],
        ),
        ("trainer.precision=17", ["Precision 17 is invalid", "bf16-mixed"]),  # Lightning's own words
        ("data.num_classes=5", ["data.num_classes=5", "has 10 classes", "set data.num_classes=10"]),
    ],
)
def test_target_mistakes_are_one_line_and_leave_no_run_folder(override, phrases, data_dir, tmp_path):
    logs = tmp_path / "logs"
    done = run([*TRAIN, "debug=toy", f"paths.data_dir={data_dir}", f"paths.log_dir={logs}", override])
    assert_one_line_error(done, *phrases, alone=False)  # the train entry point may log lines before it fails
    # no empty W&B run, and no run folder: Hydra made logs/demo/runs/<date> for it, the refusal took it back
    assert not logs.exists() or not list(logs.rglob("*")), sorted(map(str, logs.rglob("*")))


def test_a_run_folder_of_the_users_own_is_kept_when_the_run_is_refused(data_dir, tmp_path):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    done = run(
        [*TRAIN, "debug=toy", f"paths.data_dir={data_dir}", f"hydra.run.dir={out}", "model.arch=resnet5O"]
    )
    assert_one_line_error(done, "timm has no such model", alone=False)
    assert (out / "notes.txt").read_text() == "mine" and (out / ".hydra").is_dir()
    assert not list(out.rglob("wandb")), "an empty W&B run was left behind"


def test_ctrl_c_saves_and_the_printed_command_resumes_into_the_same_folder(data_dir, tmp_path):
    logs = tmp_path / "logs"
    args = [
        "recipe=demo",
        "debug=toy",
        "data=demo",  # FFCV's loader: exact mid-epoch resume
        f"paths.data_dir={data_dir}",
        f"paths.log_dir={logs}",
        "batch.global_size=32",
        "batch.max_per_device=16",  # 5 steps per epoch
        "trainer.max_steps=7",
        "trainer.max_epochs=2",
        "trainer.log_every_n_steps=1",
        "callbacks.checkpoint.every_n_train_steps=2",
        "+callbacks.checkpoint.save_top_k=-1",  # not set by the config: Hydra's + adds it
    ]  # + every epoch
    first = start_training(args)
    for line in first.stdout:  # a real Ctrl-C, once training runs
        if line.startswith("[train] epoch") and " step 1/7 " in line:
            first.send_signal(signal.SIGINT)
            break
    stdout, stderr = first.communicate(timeout=600)
    assert first.returncode == 128 + signal.SIGINT, (first.returncode, stderr[-3000:])  # a shell's 130
    assert "Traceback" not in stdout + stderr, stderr[-3000:]
    assert "weights_only" not in stdout + stderr  # Lightning's notice at every save without the argument
    (stopped,) = [ln for ln in stderr.splitlines() if "signal SIGINT at step" in ln]
    command = shlex.split(stopped.split("resume with: ", 1)[1])
    saved = Path(command[-1].removeprefix("run.ckpt_path="))
    step = resume.load_meta(saved)["global_step"]
    assert saved.name == f"signal-step{step}.ckpt" and 1 <= step < 5

    changed = run([*TRAIN, *args, "run.ckpt_path=last", "model.arch=resnet18"])
    assert_one_line_error(
        changed, "model.arch (resnet10t -> resnet18)", f"run.ckpt_path={saved}", alone=False
    )

    assert command[:3] == TRAIN  # this venv, not PATH's python
    resumed = run(command)
    assert resumed.returncode == 0 and "Traceback" not in resumed.stdout + resumed.stderr, resumed.stderr[
        -3000:
    ]
    assert "whose config differs" not in resumed.stdout + resumed.stderr  # the same config: nothing to say
    folder = saved.parent
    names = sorted(p.name for p in folder.glob("*.ckpt"))
    assert "epoch0-step5.ckpt" in names  # the epoch trigger, beside the step trigger (2, 4, 6)
    assert {"epoch0-step4.ckpt", "epoch1-step6.ckpt", "epoch1-step7.ckpt", "last.ckpt"} <= set(names)
    assert resume.load_meta(folder / "last.ckpt")["global_step"] == 7  # the final state, off the 2-step grid
    runs = sorted((logs / "demo" / "runs").iterdir())
    # the first run's folder and the resumed run's: the refused run (model.arch changed) took its folder back
    assert len(runs) == 2 and not (runs[-1] / "checkpoints").exists()  # one run's checkpoints, one folder
    assert (runs[-1] / "report.png").is_file() and "report.png" in resumed.stdout


def test_ctrl_c_twice_within_a_second_says_which_steps_are_lost(data_dir, tmp_path):
    """The second Ctrl-C stops at once, without a save: one line names the steps lost since the last
    checkpoint and resumes from it; the exit status is still Ctrl-C's 130. ResNet-50 makes a step take
    seconds on a CPU, so both signals land inside one step."""
    args = [
        "recipe=demo",
        "debug=toy",
        "model.arch=resnet50",
        f"paths.data_dir={data_dir}",
        f"paths.log_dir={tmp_path / 'logs'}",
        "trainer.max_steps=6",  # 160 images, batch 64: 2 steps per epoch
        "trainer.max_epochs=3",
        "trainer.log_every_n_steps=1",
        "callbacks.checkpoint.every_n_train_steps=2",
        "~logger",
    ]
    first = start_training(args)
    for line in first.stdout:  # two real Ctrl-Cs inside step 4
        if line.startswith("[train] epoch") and " step 3/6 " in line:
            first.send_signal(signal.SIGINT)
            break
    # the second once the first is handled: two signals that arrive inside one long C call reach Python's
    # handler once (a flag, not a count), as one Ctrl-C
    before = []
    for line in first.stderr:
        before.append(line)
        if line.startswith("Ctrl-C: saving at the end of this step"):
            first.send_signal(signal.SIGINT)
            break
    stdout, stderr = first.communicate(timeout=600)
    stderr = "".join(before) + stderr
    assert first.returncode == 128 + signal.SIGINT, (first.returncode, stderr[-3000:])
    assert "Traceback" not in stdout + stderr, stderr[-3000:]
    (said,) = [ln for ln in stderr.splitlines() if "Ctrl-C twice" in ln]
    assert "stopped at step 3 without a save, losing the 1 step since the last checkpoint (step 2;" in said
    saved = Path(shlex.split(said.split("resume from it with: ", 1)[1])[-1].removeprefix("run.ckpt_path="))
    assert resume.load_meta(saved)["global_step"] == 2
    assert not list(saved.parent.glob("signal-*"))  # nothing saved after the signals


def test_resuming_a_named_checkpoint_with_another_global_batch_says_what_changes(data_dir, tmp_path):
    """run.ckpt_path=last refuses a run of another config; a checkpoint named by its path is resumed as asked,
    and one line says which keys differ from its run's config and what that does to the schedule and data."""
    args = ["recipe=demo", "debug=toy", f"paths.data_dir={data_dir}", f"paths.log_dir={tmp_path / 'logs'}"]
    first = run([*TRAIN, *args, "~logger"])
    assert first.returncode == 0, first.stderr[-3000:]
    (saved,) = (tmp_path / "logs" / "demo" / "runs").glob("*/checkpoints/last.ckpt")
    step = resume.load_meta(saved)["global_step"]
    again = run([*TRAIN, *args, "~logger", f"run.ckpt_path={saved}", "batch.global_size=32"])
    assert again.returncode == 0 and "Traceback" not in again.stdout + again.stderr, again.stderr[-3000:]
    (said,) = [ln for ln in (again.stdout + again.stderr).splitlines() if "whose config differs" in ln]
    assert f"run.ckpt_path={saved}: resuming step {step} of a run whose config differs:" in said
    assert "batch.global_size (64 -> 32)" in said
    assert "the LR schedule, the epoch count and the evaluation steps are planned for this config" in said
    # debug=toy reads the demo's JPEGs through torchvision: that loader resumes mid-epoch too (resumable_loader)
    assert (
        "the loader continues its epoch after the images it had consumed (FFCV's and the image folder's"
        in said
    )
    assert "restart" not in said


def test_sigterm_saves_exits_143_and_the_printed_command_resumes(data_dir, tmp_path):
    """What scancel and Kubernetes send first: handled like Ctrl-C, but the exit status says killed (143)."""
    args = [
        "recipe=demo",
        "debug=toy",
        "data=demo",  # FFCV's loader: exact mid-epoch resume
        f"paths.data_dir={data_dir}",
        f"paths.log_dir={tmp_path / 'logs'}",
        "batch.global_size=32",
        "batch.max_per_device=16",
        "trainer.max_steps=7",
        "trainer.max_epochs=2",
        "trainer.log_every_n_steps=1",
    ]
    first = start_training(args)
    for line in first.stdout:  # a real SIGTERM, once training runs
        if line.startswith("[train] epoch") and " step 1/7 " in line:
            first.send_signal(signal.SIGTERM)
            break
    stdout, stderr = first.communicate(timeout=600)
    assert first.returncode == 128 + signal.SIGTERM, (first.returncode, stderr[-3000:])
    assert "Traceback" not in stdout + stderr, stderr[-3000:]
    (stopped,) = [ln for ln in stderr.splitlines() if "signal SIGTERM at step" in ln]
    command = shlex.split(stopped.split("resume with: ", 1)[1])
    saved = Path(command[-1].removeprefix("run.ckpt_path="))
    step = resume.load_meta(saved)["global_step"]
    assert saved.name == f"signal-step{step}.ckpt" and 1 <= step < 7
    assert command[:3] == TRAIN
    resumed = run(command)
    assert resumed.returncode == 0 and "Traceback" not in resumed.stdout + resumed.stderr, resumed.stderr[
        -3000:
    ]
    assert resume.load_meta(saved.parent / "last.ckpt")["global_step"] == 7


def test_damaged_demo_file_is_made_again_by_make_demo_data(data_dir, tmp_path):
    copy = tmp_path / "demo"
    shutil.copytree(data_dir / "demo", copy)
    whole = (copy / "train.beton").read_bytes()
    (copy / "train.beton").write_bytes(whole[: len(whole) // 2])
    made = run([*MAKE, "demo-data", f"out={copy}", f"args={' '.join(DEMO_ARGS)}"])
    assert made.returncode == 0, made.stderr[-3000:]
    assert "train.beton damaged" in made.stderr
    assert read_num_samples(str(copy / "train.beton"), "") == 160


def image_tree(root: Path, per_class: int, size: tuple[int, int] = (24, 20)) -> Path:
    noise = np.random.default_rng(0).integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)
    for split in ("train", "val"):
        for name in ("cat", "dog"):
            (root / split / name).mkdir(parents=True)
            for index in range(per_class):
                Image.fromarray(np.roll(noise, index, axis=1)).save(root / split / name / f"{index}.jpg")
    return root


def test_prepare_lists_what_it_drops_and_warns_about_older_splits(tmp_path):
    src = image_tree(tmp_path / "src", 250)  # 500 small images per split
    cat = src / "train" / "cat"
    (cat / "gone.jpg").symlink_to(tmp_path / "missing.jpg")
    (cat / "loop.jpg").symlink_to(cat / "loop.jpg")
    (cat / "more").mkdir()
    shutil.copy(cat / "0.jpg", cat / "more" / "0.jpg")
    out = tmp_path / "out"
    done = run([*PREPARE, "--src", str(src), "--out", str(out), "--workers", "2"])
    assert done.returncode == 0, done.stderr[-3000:]
    assert "\r" not in done.stderr + done.stdout  # not a terminal: plain lines, no tqdm redraws
    assert "write train: 500/500" in done.stderr
    for path, reason in (
        (cat / "gone.jpg", "symlink leads nowhere"),
        (cat / "loop.jpg", "symlink loop"),
        (cat / "more", "folder inside a class folder"),
    ):
        assert any(str(path) in line and reason in line for line in done.stderr.splitlines()), done.stderr
    assert (out / "train.beton").stat().st_size < 8 << 20  # 2 MiB pages for a small dataset, not 25 MB

    again = run([*PREPARE, "--src", str(src), "--out", str(out), "--splits", "train"])
    assert again.returncode == 0 and "keeps val.beton from an earlier conversion" in again.stderr, (
        again.stderr
    )

    a_file = tmp_path / "not_a_folder"
    a_file.write_text("")
    for where, phrase in ((a_file, "is a file, not a folder"), (a_file / "sub", "cannot write to --out")):
        wrong = run([*PREPARE, "--src", str(src), "--out", str(where)])
        assert_one_line_error(wrong, phrase, alone=False)


def test_prepare_to_a_read_only_file_system_is_one_line(tmp_path):
    """A real read-only mount (tmpfs, ro) in a user and mount namespace of its own: no root, nothing left mounted."""
    if (
        shutil.which("unshare") is None
        or subprocess.run(["unshare", "-rm", "true"], capture_output=True, check=False).returncode != 0
    ):
        pytest.skip("needs unshare -rm (user and mount namespaces) to mount a read-only file system")
    src = image_tree(tmp_path / "src", 2)
    mount, out = tmp_path / "ro", tmp_path / "ro" / "out"
    mount.mkdir()
    prepare = shlex.join([*PREPARE, "--src", str(src), "--out", str(out)])
    script = f"mount -t tmpfs -o ro tmpfs {shlex.quote(str(mount))} && exec {prepare}"
    done = run(["unshare", "-rm", "sh", "-c", script])
    assert_one_line_error(
        done, f"cannot write to --out {out} (Read-only file system)", "choose a writable folder", alone=False
    )


def _forked_workers(pid: int) -> set[int]:
    """Children of ``pid`` forked from it (same command line; not multiprocessing's resource tracker)."""
    found = set()
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            fields = dict(line.split(":\t", 1) for line in status.read_text().splitlines() if ":\t" in line)
            forked = (status.parent / "cmdline").read_bytes() == Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if fields.get("PPid", "").strip() == str(pid) and forked:
            found.add(int(status.parent.name))
    return found


def test_prepare_workers_die_with_a_killed_parent(tmp_path):
    # 2 x 1000 noise images of 256 px, re-encoded as JPEG: several seconds of work per writer process, so a
    # worker that is still there 2 s after its parent's death was not killed with it
    src = image_tree(tmp_path / "src", 1000, (256, 256))
    out = tmp_path / "out"
    parent = subprocess.Popen(
        [
            *PREPARE,
            "--src",
            str(src),
            "--out",
            str(out),
            "--workers",
            "2",
            "--write-mode",
            "jpg",
        ],
        cwd=ROOT,
        env=ENV,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 300
    workers: set[int] = set()
    while time.monotonic() < deadline and parent.poll() is None:  # FFCV's writer processes are running
        if list(out.glob("train.beton.tmp-*")):
            workers = _forked_workers(parent.pid)
            if len(workers) == 2:
                break
        time.sleep(0.02)
    assert workers, "the writer never started"
    parent.kill()  # kill -9
    parent.wait()
    deadline = time.monotonic() + 2
    while time.monotonic() < deadline and any(
        Path(f"/proc/{pid}").exists() and _state(pid) != "Z" for pid in workers
    ):
        time.sleep(0.1)
    alive = [pid for pid in workers if Path(f"/proc/{pid}").exists() and _state(pid) != "Z"]
    for pid in alive:  # clean up before failing
        os.kill(pid, signal.SIGKILL)
    assert not alive, f"writer processes {alive} outlived their parent"


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except OSError:
        return "gone"


def test_the_batch_advised_for_a_tiny_image_folder_trains(tmp_path):
    """24 images under debug=toy (batch 64): the one-line refusal names a global batch, and that batch trains."""
    rng = np.random.default_rng(0)
    for split in ("train", "val"):
        for label in ("a", "b"):
            folder = tmp_path / "tiny" / split / label
            folder.mkdir(parents=True)
            for n in range(12):
                Image.fromarray(rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)).save(folder / f"{n}.jpg")
    logs = tmp_path / "logs"
    args = ["debug=toy", "data=imagefolder", f"data.root={tmp_path / 'tiny'}", "data.num_classes=2"]
    refused = run([*TRAIN, *args, f"paths.log_dir={logs}"])
    line = assert_one_line_error(refused, "the data has 24 training images", "set batch.global_size=")
    advised = line.partition("set ")[2].partition(" (")[0]  # batch.global_size=N
    done = run([*TRAIN, *args, advised, f"paths.log_dir={logs}", "~logger"])
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    assert len(list(logs.glob("demo/runs/*/results.json"))) == 1
