"""Progress: a tqdm bar with images/s, run ETA and LR on a terminal; plain periodic lines in logs (SLURM).

Either way the plain lines (every ``trainer.log_every_n_steps`` steps, and each evaluation) go to the run's
train.log too (`lightning_lars.runtime.run_log.to_run_file`).
"""

from __future__ import annotations

import math
import re
import sys
import time
from collections import deque

from lightning.pytorch.callbacks import ProgressBar, TQDMProgressBar
from lightning_lars.callbacks.techniques.evaluation import planned_epochs, planned_steps

from lightning_lars.runtime.run_log import to_run_file


def _batch_size(batch) -> int:
    images = batch[0] if isinstance(batch, (list, tuple)) else batch
    return int(images.shape[0])


def format_duration(seconds: float) -> str:
    """``1:02:03`` style; ``?`` when not yet known."""
    if not math.isfinite(seconds):
        return "?"
    seconds = round(seconds)
    hours, rest = divmod(seconds, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}"


class RunClock:
    """Images/s and the ETA of the whole run over a sliding window of recent training batches.

    Wall time between batch ends, so data waiting counts (what the user waits for). Validation is not in
    the window (it restarts each epoch) and not in the ETA. Until the restarted window holds two batches,
    the rate is the last one measured (NaN only before any was).
    """

    def __init__(self, window: int = 50):
        self._marks: deque[tuple[float, int, int]] = deque(maxlen=window)  # (time s, images, optimizer step)
        self._images = 0
        self._last_rate = float("nan")  # images/s of one device, over the last full window

    def restart(self) -> None:
        self._marks.clear()

    def mark(self, images: int, step: int) -> None:
        self._images += images
        self._marks.append((time.perf_counter(), self._images, step))

    def images_per_sec(self, world_size: int) -> float:
        if len(self._marks) >= 2:
            (t0, n0, _), (t1, n1, _) = self._marks[0], self._marks[-1]
            if t1 > t0:
                self._last_rate = (n1 - n0) / (t1 - t0)
        return self._last_rate * world_size

    def eta_s(self, total_steps: float) -> float:
        if len(self._marks) < 2:
            return float("nan")
        (t0, _, s0), (t1, _, s1) = self._marks[0], self._marks[-1]
        if s1 <= s0:
            return float("nan")
        return (total_steps - s1) * (t1 - t0) / (s1 - s0)


def _status(trainer, clock: RunClock) -> dict[str, str]:
    lr = trainer.optimizers[0].param_groups[0]["lr"] if trainer.optimizers else float("nan")
    total = trainer.estimated_stepping_batches
    rate = clock.images_per_sec(trainer.world_size)
    return {
        "lr": f"{lr:.4g}",
        "img/s": f"{rate:,.0f}" if math.isfinite(rate) else "-",  # "-": not measured yet
        "eta": format_duration(clock.eta_s(total)),
    }


def train_line(trainer, clock: RunClock) -> str:
    """``[train] epoch 1.50/8 step 3/312 (1.0%) | loss 2.3461 | lr 1.25 | 9 img/s | eta 0:00:07``."""
    step, total = trainer.global_step, trainer.estimated_stepping_batches
    status = _status(trainer, clock)
    loss = trainer.callback_metrics.get("train/loss_step", trainer.callback_metrics.get("train/loss"))
    loss_text = f"loss {float(loss):.4f} | " if loss is not None else ""
    epochs = planned_epochs(trainer, step)
    where = (
        f"epoch {epochs:.2f}/{planned_epochs(trainer, planned_steps(trainer) or total):.4g}"
        if epochs is not None
        else f"epoch {trainer.current_epoch + 1}/{trainer.max_epochs}"
    )
    return (
        f"[train] {where} step {step}/{total} ({100 * step / total:.1f}%) | {loss_text}lr {status['lr']}"
        f" | {status['img/s']} img/s | eta {status['eta']}"
    )


def val_line(trainer) -> str:
    """``[val] epoch 1 step 2 | val/loss 2.3005 | val/top1 0.0938 | val/top5 0.5156``."""
    shown = {k: float(v) for k, v in trainer.callback_metrics.items() if k.startswith("val/")}
    values = " | ".join(f"{k} {v:.4f}" for k, v in sorted(shown.items()))
    epochs = planned_epochs(trainer, trainer.global_step)
    where = f"{epochs:.4g}" if epochs is not None else f"{trainer.current_epoch + 1}"
    return f"[val] epoch {where} step {trainer.global_step} | {values}"


def _of_epochs(trainer) -> str:
    """``/90``: the planned epochs (the run sets Lightning's max_epochs to -1 and stops at its planned step),
    else Lightning's max_epochs where it is a limit, else nothing."""
    total = trainer.estimated_stepping_batches
    planned = planned_epochs(trainer, total) if math.isfinite(total) else None
    if planned is not None:
        return f"/{planned:.4g}"
    return f"/{trainer.max_epochs}" if trainer.max_epochs is not None and trainer.max_epochs > 0 else ""


class TerminalProgressBar(TQDMProgressBar):
    """Lightning's tqdm bar plus ``lr``, ``img/s`` (all devices) and ``eta`` (whole run, training only)."""

    def __init__(self, refresh_rate: int = 1, window: int = 50):
        super().__init__(refresh_rate=refresh_rate)
        self.clock = RunClock(window)
        self._shown: dict | None = None  # the postfix shown since the last log step
        self._filed_step = -1  # the last step whose line went to train.log

    def init_train_tqdm(self):
        bar = super().init_train_tqdm()
        # one ETA: the run's (in the postfix), not also tqdm's remaining time of this epoch
        bar.bar_format = "{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}{postfix}]"
        lightning_set_description = bar.set_description

        def set_description(desc=None, refresh=True):
            # numbered as the plain lines are ("epoch 1/8"), not Lightning's 0-based "Epoch 0"
            epoch = re.fullmatch(r"Epoch (\d+)", desc or "")
            if epoch and self._trainer is not None:
                desc = f"Epoch {int(epoch.group(1)) + 1}{_of_epochs(self._trainer)}"
            lightning_set_description(desc, refresh)

        bar.set_description = set_description
        return bar

    def on_train_epoch_start(self, trainer, *args):
        self.clock.restart()
        super().on_train_epoch_start(trainer, *args)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.clock.mark(_batch_size(batch), trainer.global_step)
        super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)
        step = trainer.global_step
        if trainer.is_global_zero and step and step != self._filed_step:
            if step % max(1, trainer.log_every_n_steps) == 0:  # the plain lines' rate, in train.log
                self._filed_step = step
                to_run_file(train_line(trainer, self.clock))

    def on_validation_end(self, trainer, pl_module):
        super().on_validation_end(trainer, pl_module)
        if trainer.is_global_zero and not trainer.sanity_checking:
            to_run_file(val_line(trainer))

    def get_metrics(self, trainer, pl_module):
        # The loss shown is a device tensor: reading it makes the host wait for the device, so while training
        # the postfix is refreshed only at log steps (every trainer.log_every_n_steps optimizer steps) and
        # the bar's counter moves on in between.
        step = trainer.global_step
        if trainer.training and self._shown is not None and step % max(1, trainer.log_every_n_steps):
            return self._shown
        metrics = super().get_metrics(trainer, pl_module)
        metrics.pop("v_num", None)
        if not trainer.training:
            return metrics
        loss = trainer.callback_metrics.get("train/loss_step")
        shown_loss = {"loss": f"{float(loss):.4g}"} if loss is not None else {}
        self._shown = {**metrics, **shown_loss, **_status(trainer, self.clock)}
        return self._shown


class LogLineProgress(ProgressBar):
    """One plain line every ``every_n_steps`` optimizer steps and after each validation, rank 0 only.

    For logs that are not a terminal (SLURM, ``| tee``): a tqdm bar there is a wall of carriage returns.
    """

    def __init__(self, every_n_steps: int | None = None, window: int = 50, stream=None):
        super().__init__()
        self.every_n_steps = every_n_steps
        self.clock = RunClock(window)
        self.stream = stream
        self._enabled = True
        self._last_printed_step = -1

    def disable(self) -> None:
        self._enabled = False

    def enable(self) -> None:
        self._enabled = True

    def _print(self, trainer, text: str) -> None:
        if self._enabled and trainer.is_global_zero:
            print(text, file=self.stream or sys.stdout, flush=True)
            to_run_file(text)

    def on_train_start(self, trainer, pl_module):
        if self.every_n_steps is None:
            self.every_n_steps = max(1, trainer.log_every_n_steps)
        total = trainer.estimated_stepping_batches
        epochs = planned_epochs(trainer, total) if total != float("inf") else None
        epochs_text = f"{epochs:.4g} epochs" if epochs is not None else f"max {trainer.max_epochs} epochs"
        self._print(
            trainer,
            f"[train] start: {total} optimizer steps, {epochs_text},"
            f" {self.total_train_batches} batches per pass over the data per device",
        )

    def on_train_epoch_start(self, trainer, pl_module):
        self.clock.restart()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.clock.mark(_batch_size(batch), trainer.global_step)
        step = trainer.global_step
        if step % self.every_n_steps or step == self._last_printed_step or step == 0:
            return
        self._last_printed_step = step
        self._print(trainer, train_line(trainer, self.clock))

    def on_validation_end(self, trainer, pl_module):
        if trainer.sanity_checking:
            return
        self._print(trainer, val_line(trainer))


def progress_bar(
    every_n_steps: int | None = None, refresh_rate: int = 1, force: str | None = None
) -> ProgressBar:
    """The bar for where output goes: tqdm on a terminal, plain lines otherwise (``force``: "bar"/"lines")."""
    if force not in (None, "bar", "lines"):
        raise ValueError(f"force={force!r}: use 'bar', 'lines' or null")
    use_bar = force == "bar" or (force is None and sys.stdout.isatty())
    return TerminalProgressBar(refresh_rate=refresh_rate) if use_bar else LogLineProgress(every_n_steps)
