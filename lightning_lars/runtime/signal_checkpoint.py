"""The save on a preemption signal: `SignalCheckpoint`.

On SIGUSR1 (our sbatch's warning before preemption, ``--signal=SIGUSR1@90``) or submitit's SIGUSR2, it saves at
an optimizer-step boundary agreed by all ranks, then stops the run with `Preempted`. The requeue is Lightning's
(``SLURMEnvironment(auto_requeue=True)``) or submitit's own handler, run at that boundary or after fit instead
of inside the signal, where it would catch the step half done. The same callback makes Ctrl-C (SIGINT) save the
same way and print the resume command, exiting 130 as a shell expects after Ctrl-C (twice: stop now, and say
which steps that loses), and SIGTERM save and exit 143.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import shlex
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

import lightning as L
import torch

from lightning_lars.runtime import resume
from lightning_lars.runtime.checkpoint_io import checkpoint_io, one_line
from lightning_lars.runtime.checkpointing import distributed
from lightning_lars.runtime.preemption import (
    Preempted,
    is_submitit_handler,
    preemption_signals,
    requeue_job_id,
)

# Lightning logs "`weights_only` was not set, defaulting to `False`." at every save without the argument, as
# its own SLURM requeue save does: our checkpoints are always full (exact resume). Only that record is dropped.
logging.getLogger("lightning.pytorch.trainer.connectors.checkpoint_connector").addFilter(
    lambda record: "`weights_only` was not set" not in record.getMessage()
)


# Said at once on the first Ctrl-C: the save waits for the step to end (seconds on a big model).
FIRST_CTRL_C = (
    "Ctrl-C: saving at the end of this step, then stopping (Ctrl-C again: stop now, without a save)\n"
)


class SignalCheckpoint(L.Callback):
    """On a preemption signal: checkpoint at an optimizer-step boundary all ranks agree on, then raise `Preempted`.

    Signals, in order of precedence: the preemption signals
    (`lightning_lars.runtime.preemption.preemption_signals`: SIGUSR1, what our sbatch asks for,
    ``--signal=SIGUSR1@90``, Lightning's requeue signal, and submitit's, ``SUBMITIT_PREEMPT_SIGNAL``, default
    USR2: hydra-submitit-launcher's jobs get ``--signal=USR2@<signal_delay_s>``), then SIGINT (Ctrl-C; a second
    one stops at once, without a save: `abort_message` says what that lost) and SIGTERM (``scancel``, a job's time
    limit); both exit as the shell reports a process they killed, 128 + the signal (130, 143). The handler only
    records the signal. Then, at the end of a batch that stepped the optimizer:

    - one process: checked at every step (a Python flag, no synchronisation);
    - distributed: about every ``check_every_s`` seconds all ranks agree, at a step boundary, in one all-reduce
      (the only host-device sync this callback makes) of (the signal seen, steps until the next agreement): a
      rank that got no signal stops at the same step and acts on the same signal (the first in the order above
      that any rank saw: a preemption's requeue is never lost to a SIGTERM on another rank), and every rank
      picks the same next step, the fewest steps any rank measured to fill ``check_every_s`` (the first
      agreement, at the first step, times that step from its first batch: the loader's start-up is not step
      time). Time, not a step count: with heavy accumulation 10 steps can outlast the warning. Where
      ``trainer.log_every_n_steps`` steps fit in that window, the next agreement is the last log step inside
      it, so the sync falls on a step that reads the device anyway (logging); only where one log interval
      outlasts ``check_every_s`` does it fall between log steps.

    What follows the agreed stop, on every rank:

    - submitit's handler was in place (a hydra-submitit-launcher job): save ``signal-step<n>.ckpt`` in the
      checkpoint folder, then, after fit has unwound, submitit's own handler runs (`Preempted.then`): rank 0
      re-pickles the job and runs ``scontrol requeue``; the requeued job resumes from that checkpoint;
    - under SLURM with Lightning's requeue handler: that handler saves ``hpc_ckpt_<n>.ckpt`` in the run dir and
      runs ``scontrol requeue`` (we run it at the boundary instead of inside the signal, mid-step);
    - otherwise: save ``signal-step<n>.ckpt``; resume with ``run.ckpt_path=last``.

    Args:
        check_every_s: seconds of training between agreements when distributed (0: at every step). The save
            starts within about this long, or one step if a step takes longer, after the signal: keep it well
            inside the warning (90 s), with the save's own time.
        signal_names: the signals to catch, first the one that wins (None: SIGUSR1, submitit's, SIGINT,
            SIGTERM).
    """

    def __init__(self, check_every_s: float = 10.0, signal_names: list[str] | None = None):
        if not check_every_s >= 0:
            raise ValueError(f"check_every_s={check_every_s} must be >= 0 seconds")
        self.check_every_s = check_every_s
        self.num_agreements = 0  # all-reduces made (distributed only)
        self._next_check = 0  # the optimizer step at which all ranks agree next
        # (step, time.monotonic()) of the last agreement; None until the first batch starts
        self._checked: tuple[int, float] | None = None
        # dict.fromkeys keeps the order and drops a repeat (submitit's signal set to INT or TERM)
        if signal_names is None:
            self.signums = list(dict.fromkeys([*preemption_signals(), signal.SIGINT, signal.SIGTERM]))
        else:
            self.signums = preemption_signals(signal_names)
        self.received: int | None = None  # the signal this rank acts on: the first of `signums` it has seen
        self._interrupted = False  # a Ctrl-C came: the next one stops at once
        self.aborted = False  # the second Ctrl-C came: the run stopped without a save
        self._says_first_ctrl_c = False  # global rank 0 only: every rank of a terminal's job gets the Ctrl-C
        self._displaced: dict[int, Any] = {}  # signal -> the handler ours replaced (Lightning's, submitit's)
        self._step_seen = -1

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # Lightning registers its handlers right before training starts (submitit before the job runs), so
        # they are in place here.
        self._step_seen = trainer.global_step
        self._says_first_ctrl_c = trainer.is_global_zero
        self._next_check = trainer.global_step + 1  # the first agreement measures the first step's time
        self._checked = None  # the clock starts with the first batch (on_train_batch_start)
        if threading.current_thread() is not threading.main_thread():
            return
        for signum in self.signums:
            current = signal.getsignal(signum)
            self._displaced[signum] = current if callable(current) else None
            signal.signal(signum, self._record)

    def _record(self, signum: int, frame: Any) -> None:
        if signum == signal.SIGINT:
            if self._interrupted:  # Ctrl-C twice: stop now, without a save (Lightning then exits 1)
                self.aborted = True  # the entry point says what was lost and exits 130 (abort_message)
                raise KeyboardInterrupt
            self._interrupted = True
            # to fd 2 in one write: a print here could land inside the main thread's own print
            if self._says_first_ctrl_c:
                with contextlib.suppress(OSError):
                    os.write(2, FIRST_CTRL_C.encode())
        if self.received is None or self.signums.index(signum) < self.signums.index(self.received):
            self.received = signum

    def on_train_batch_start(self, trainer: L.Trainer, pl_module, batch, batch_idx: int) -> None:
        # Not at on_train_start: the loader's start-up (worker processes, FFCV's JIT-compiled pipeline, seconds)
        # lies between the two, and counted as step time it shrinks the first window below one log interval,
        # putting the next agreement's host read between log steps.
        if self._checked is None:
            self._checked = (trainer.global_step, time.monotonic())

    def on_train_batch_end(self, trainer: L.Trainer, pl_module, outputs, batch, batch_idx: int) -> None:
        if trainer.global_step == self._step_seen:  # mid-accumulation: the optimizer has not stepped yet
            return
        self._step_seen = trainer.global_step
        signum = self.received
        if distributed(trainer):
            if trainer.global_step < self._next_check:
                return
            signum = self._agree(trainer)  # a signal that comes during it stays in self.received: next time
        if signum is not None:
            self._stop(trainer, signum)

    def _agree(self, trainer: L.Trainer) -> int | None:
        """One all-reduce (max) of (the seen signal's precedence, -steps to the next agreement): the first signal
        in `signums` that any rank saw (None: none), and the fewest steps any rank measured to fill
        ``check_every_s``, so every rank agrees next at the same step."""
        step, now = trainer.global_step, time.monotonic()
        checked_step, checked_at = self._checked or (step, now)  # set by the first batch's start
        step_s = (now - checked_at) / max(1, step - checked_step)
        steps = max(1, int(self.check_every_s / step_s)) if step_s > 0 else 1
        received = self.received  # read once: the handler may set it between two reads
        # precedence: len(signums) for the first signal, 1 for the last, 0 for none
        precedence = len(self.signums) - self.signums.index(received) if received is not None else 0
        decision = torch.tensor([float(precedence), -float(steps)], device=trainer.strategy.root_device)
        torch.distributed.all_reduce(decision, op=torch.distributed.ReduceOp.MAX)
        seen, fewest = decision.tolist()  # one device-to-host copy
        self.num_agreements += 1
        window, log_every = int(-fewest), max(1, int(trainer.log_every_n_steps))
        # the same on every rank: the step and the window were agreed
        last_log_step = (step + window) // log_every * log_every
        self._next_check = last_log_step if last_log_step > step else step + window
        self._checked = (step, now)
        return self.signums[len(self.signums) - int(seen)] if seen > 0 else None

    def _stop(self, trainer: L.Trainer, signum: int) -> None:
        """Save and raise `Preempted` for ``signum``, on every rank the same (the agreed one when distributed)."""
        name = signal.Signals(signum).name
        requeue = signum not in (signal.SIGINT, signal.SIGTERM)  # Ctrl-C, scancel: never a requeue
        # submitit's requeue handler (on its USR2), whichever preemption signal came; on SIGTERM submitit has
        # only its `bypass`, which does nothing
        handlers = [h for s, h in self._displaced.items() if s not in (signal.SIGINT, signal.SIGTERM)]
        submitit = next((h for h in handlers if is_submitit_handler(h)), None) if requeue else None
        displaced = self._displaced.get(signum)
        lightning = displaced if requeue and not is_submitit_handler(displaced) else None
        job_id = requeue_job_id()
        io = checkpoint_io(trainer)
        failed_before = io.num_failed_writes if io else 0
        then = None
        if submitit is None and lightning is not None and job_id is not None:
            lightning(signum, None)  # Lightning: save hpc checkpoint + scontrol requeue
            where, next_step = f"checkpoint in {trainer.default_root_dir}", f"SLURM job {job_id} requeued"
        else:
            folder = (
                trainer.checkpoint_callback.dirpath
                if trainer.checkpoint_callback
                else trainer.default_root_dir
            )
            path = Path(folder) / f"signal-step{trainer.global_step}.ckpt"
            trainer.save_checkpoint(path, weights_only=False)  # the full state: exact resume
            where = f"checkpoint {path}"
            if submitit is not None:
                next_step = "submitit requeues the job (rank 0), which resumes from it"
                then = functools.partial(submitit, signum, None)  # runs once fit has unwound
            else:
                next_step = f"resume with: {resume_command(path)}"
        # disk full or gone: the older checkpoints still count
        if io and io.num_failed_writes > failed_before:
            where = f"checkpoint NOT written ({one_line(io.last_error)}), the newest earlier one is used"
        # Ctrl-C and SIGTERM: the status a shell gives a process the signal ended (130, 143); a requeue: 0
        status = 128 + signum if signum in (signal.SIGINT, signal.SIGTERM) else 0
        raise Preempted(
            f"signal {name} at step {trainer.global_step}: {where}; {next_step}",
            then=then,
            exit_status=status,
        )

    def abort_message(self, trainer: L.Trainer) -> str:
        """One line after the second Ctrl-C: the step it stopped at, the steps since the newest checkpoint that
        loads (lost) and the command that resumes from that checkpoint."""
        step = trainer.global_step
        folder = (
            trainer.checkpoint_callback.dirpath
            if trainer.checkpoint_callback and trainer.checkpoint_callback.dirpath
            else trainer.default_root_dir
        )
        newest = resume.newest_good([Path(folder)])
        if newest is None:
            return (
                f"Ctrl-C twice: stopped at step {step} without a save, losing all {step} steps: no checkpoint"
                " was written yet (press Ctrl-C once to save first)"
            )
        saved = int(resume.load_meta(newest)["global_step"])
        lost = f"{step - saved} step{'s' if step - saved != 1 else ''}"
        return (
            f"Ctrl-C twice: stopped at step {step} without a save, losing the {lost} since the last checkpoint"
            f" (step {saved}; press Ctrl-C once to save first); resume from it with: {resume_command(newest)}"
        )

    def _restore_handlers(self) -> None:
        """Put back what we replaced, where ours is still in place (Lightning restores its own at teardown)."""
        if threading.current_thread() is not threading.main_thread():
            return
        for signum, handler in self._displaced.items():
            if signal.getsignal(signum) == self._record:
                signal.signal(signum, handler if handler is not None else signal.SIG_DFL)
        self._displaced = {}

    def on_exception(
        self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException
    ) -> None:
        self._restore_handlers()

    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._restore_handlers()
        self.received, self._interrupted = None, False


def resume_command(path: Path) -> str:
    """This run's command line with ``run.ckpt_path`` pointing at ``path`` (quoted for the shell)."""
    args = [a for a in sys.argv[1:] if not a.lstrip("+").startswith("run.ckpt_path=")]
    # this interpreter: the project's venv, not whichever python comes first on the user's PATH
    return shlex.join([sys.executable, "-m", "lightning_lars.train", *args, f"run.ckpt_path={path}"])
