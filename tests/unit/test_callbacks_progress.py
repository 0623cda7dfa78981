"""Progress output: plain lines off a terminal (SLURM logs), a tqdm bar with LR, img/s and ETA on one."""

import io
import logging

from callback_harness import classifier, images, loader, trainer
from lightning_lars.callbacks.monitors.progress import (
    LogLineProgress,
    RunClock,
    TerminalProgressBar,
    format_duration,
    progress_bar,
)
from lightning_lars.callbacks.techniques.evaluation import EvaluationSchedule
from lightning_lars.callbacks.techniques.schedule import ScheduleCallback

from lightning_lars.runtime import run_log


def test_plain_lines_show_step_loss_lr_throughput_and_eta(tmp_path):
    stream = io.StringIO()
    progress = LogLineProgress(every_n_steps=2, stream=stream)
    fit = trainer(
        [progress, ScheduleCallback()],
        tmp_path,
        max_steps=6,
        enable_progress_bar=True,
        limit_val_batches=1,
        val_check_interval=3,
    )
    fit.fit(classifier("sgd", lr_schedule=lambda step: 0.25), loader(images(48)), loader(images(8, seed=1)))
    lines = stream.getvalue().splitlines()
    train = [ln for ln in lines if ln.startswith("[train] epoch")]
    assert [ln.split(" step ")[1].split()[0] for ln in train] == ["2/6", "4/6", "6/6"]
    assert all("lr 0.25" in ln and " img/s " in ln and "eta " in ln and "loss " in ln for ln in train)
    assert "eta 0:00:00" in train[-1]  # nothing left at the last step
    assert sum(ln.startswith("[val]") and "val/top1" in ln for ln in lines) == 2
    assert "\r" not in stream.getvalue()


def test_the_choice_follows_stdout(monkeypatch):
    monkeypatch.setattr("sys.stdout.isatty", lambda: False)
    assert isinstance(progress_bar(), LogLineProgress)
    monkeypatch.setattr("sys.stdout.isatty", lambda: True)
    assert isinstance(progress_bar(), TerminalProgressBar)
    assert isinstance(progress_bar(force="lines"), LogLineProgress)


def test_run_clock_measures_rate_and_eta(monkeypatch):
    now = [100.0]
    monkeypatch.setattr("lightning_lars.callbacks.monitors.progress.time.perf_counter", lambda: now[0])
    clock = RunClock(window=10)
    for step in range(1, 6):  # 64 images per optimizer step, 0.5 s each
        now[0] += 0.5
        clock.mark(64, step)
    assert clock.images_per_sec(world_size=2) == 256.0  # 64 x 2 devices / 0.5 s
    assert clock.eta_s(total_steps=25) == 10.0  # 20 steps left x 0.5 s


def test_format_duration():
    assert format_duration(3723) == "1:02:03" and format_duration(float("nan")) == "?"


def test_terminal_bar_shows_lr_throughput_and_eta(tmp_path, capsys):
    bar = progress_bar(force="bar")
    fit = trainer(
        [bar, ScheduleCallback()], tmp_path, max_steps=4, enable_progress_bar=True, limit_val_batches=0
    )
    fit.fit(classifier("sgd", lr_schedule=lambda step: 0.125), loader(images(32)))
    shown = capsys.readouterr().out
    assert "lr=0.125" in shown and "img/s=" in shown and "eta=0:00:00" in shown
    final = shown.split("\r")[-1]
    assert "Epoch 1/1" in final and "Epoch 0" not in shown  # numbered as the plain lines: "epoch 1/1"
    assert "<" not in final  # one ETA (the run's): no tqdm "elapsed<remaining" beside it


def test_terminal_bar_counts_the_planned_epochs_when_lightning_has_no_epoch_limit(tmp_path, capsys):
    """The run sets Lightning's max_epochs to -1 and stops at its planned step: the bar reads the plan."""
    bar = progress_bar(force="bar")
    schedule = EvaluationSchedule([4], epoch_at=lambda step: step / 2)  # 2 updates per source epoch: 2 epochs
    fit = trainer(
        [bar, schedule, ScheduleCallback()],
        tmp_path,
        max_steps=4,
        enable_progress_bar=True,
        check_val_every_n_epoch=None,
        val_check_interval=1,
    )
    fit.fit_loop.max_epochs = -1
    fit.fit(classifier("sgd", lr_schedule=lambda step: 0.125), loader(images(32)), loader(images(8)))
    shown = capsys.readouterr().out
    assert "Epoch 1/2" in shown and "/-1" not in shown, shown[-500:]


def test_terminal_bar_writes_the_plain_lines_to_train_log(tmp_path, capsys, monkeypatch, request):
    """On a terminal the console shows the bar; train.log (the file handler `run_log.log_to_run_file` gives the
    run-file logger) gets the plain lines at the log steps and each evaluation, and no carriage return."""
    handler = logging.FileHandler(tmp_path / "train.log")
    monkeypatch.setattr(run_log.RUN_FILE_LOGGER, "handlers", [handler])
    # setLevel, as log_to_run_file does, not the attribute: the logger caches isEnabledFor's answers, and an
    # earlier run in this process (no level set: INFO off) left "INFO: no" there, so nothing reached the file
    request.addfinalizer(lambda level=run_log.RUN_FILE_LOGGER.level: run_log.RUN_FILE_LOGGER.setLevel(level))
    run_log.RUN_FILE_LOGGER.setLevel(logging.INFO)
    fit = trainer(
        [progress_bar(force="bar"), ScheduleCallback()],
        tmp_path,
        max_steps=6,
        enable_progress_bar=True,
        limit_val_batches=1,
        val_check_interval=3,
        log_every_n_steps=2,
    )
    fit.fit(classifier("sgd", lr_schedule=lambda step: 0.25), loader(images(48)), loader(images(8, seed=1)))
    handler.close()
    log = (tmp_path / "train.log").read_text()
    train = [ln for ln in log.splitlines() if ln.startswith("[train] epoch")]
    assert [ln.split(" step ")[1].split()[0] for ln in train] == ["2/6", "4/6", "6/6"], log
    assert all("lr 0.25" in ln and " img/s " in ln and "nan" not in ln for ln in train), train
    assert sum(ln.startswith("[val]") and "val/top1" in ln for ln in log.splitlines()) == 2, log
    shown = capsys.readouterr()
    assert "\r" not in log and "\r" in shown.out + shown.err, log  # the bar stays on the console
