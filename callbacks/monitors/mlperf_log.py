"""The MLPerf result log: ``<run dir>/mlperf.log`` written with ``mlperf_logging.mllog`` (rank 0 only)."""

from __future__ import annotations

import logging
import math
import time
from pathlib import Path

import lightning as L
from lightning.pytorch.utilities import rank_zero_info
from lightning_lars.callbacks import find_callback
from lightning_lars.callbacks.monitors.time_to_target import TimeToTarget
from lightning_lars.callbacks.techniques.evaluation import EvaluationSchedule

from lightning_lars.models.batch_norm import batch_norms
from lightning_lars.report import mlperf

LOG_FILE = "mlperf.log"
# metadata that numbers an event; with the key, it makes a replayed event (after a resume) recognisable
NUMBERING = ("epoch_num", "first_epoch_num")


class MLPerfLog(L.Callback):
    """Writes the MLPerf events of a run, in MLPerf's 1-based epoch count, to ``<run dir>/mlperf.log``.

    * ``setup``: ``cache_clear``, ``init_start`` and the ``submission_*`` keys (from ``mlperf.*``), timed there
      and written at ``on_train_start``: only then has Lightning restored the checkpoint (``trainer.ckpt_path``),
      which names the folder whose log a resumed run continues;
    * ``on_train_start``: the hyperparameters as the run really uses them: ``global_batch_size`` (device batch x
      devices x accumulation), ``train_samples`` / ``eval_samples`` (the data module's images, the val limit
      applied), ``opt_name`` and each ``lars_*`` value (the optimizer's adapted param group and the LR schedule
      object), ``model_bn_span`` (the model's BatchNorm modules) and ``gradient_accumulation_steps``; then
      ``init_stop`` and ``run_start``;
    * ``block_start`` / ``epoch_start`` / ``epoch_stop`` / ``eval_start`` / ``eval_accuracy`` / ``eval_stop`` /
      ``block_stop`` at the plan's steps: a block runs from the epoch after one evaluation to the next;
    * ``run_stop``: status ``success`` at the first evaluation at or above ``callbacks.time_to_target``'s
      target, ``aborted`` when training ends below it. A run stopped by a signal logs no ``run_stop``.

    v0.6 logged ``opt_base_learning_rate`` and ``opt_learning_rate_warmup_epochs`` where later rounds log
    ``lars_opt_*``; the keys follow ``round``. A resumed run appends to the log of the run folder its checkpoint
    lies in (whatever folder the resume itself runs in: ``run.ckpt_path=last`` or the printed resume command
    start a new one) and skips every event the log already holds (``run_start`` and the replayed epochs
    included), so a run interrupted any number of times leaves one continuous log. ``round`` None: nothing is
    written.
    """

    def __init__(self, settings=None, dirpath: str = "."):
        settings = dict(settings or {})
        self.round = settings.get("round")
        self.settings = {
            key: getattr(value, "value", value) for key, value in settings.items()
        }  # Enum -> text
        self.dirpath = Path(dirpath)
        self.path: Path | None = None
        self._mllog = None
        # (kind, key, value, metadata, time in ms) logged before the log is opened; None: nothing to write
        self._pending: list[tuple] | None = None
        self._logged_before: set[tuple[str, float | None]] = set()
        self._block: int | None = None
        self._epoch: int | None = None
        self._steps_seen = 0
        self._stopped = False

    # -- writing -------------------------------------------------------------------------------------------
    def _open(self, trainer) -> None:
        if self.round is None or not trainer.is_global_zero:
            return
        try:
            # optional extra: a run without it says so in one line
            from mlperf_logging.mllog.mllog import MLLogger
        except ImportError:
            rank_zero_info(
                f"[lightning-lars] no MLPerf log written (mlperf.round={self.round}): {mlperf.MISSING}"
            )
            return
        ckpt = Path(trainer.ckpt_path) if trainer.ckpt_path else None
        # a resumed run writes into the folder of the run it resumes: <run>/checkpoints/*.ckpt, or Lightning's
        # SLURM requeue checkpoint <run>/hpc_ckpt_<n>.ckpt; a checkpoint from elsewhere starts a log here
        folder = self.dirpath
        if ckpt is not None and ckpt.parent.name == "checkpoints":
            folder = ckpt.parent.parent
        elif ckpt is not None and ckpt.name.startswith("hpc_ckpt"):
            folder = ckpt.parent
        self.path = folder / LOG_FILE
        self._logged_before = _events(self.path)
        self._stopped = ("run_stop", None) in self._logged_before
        if self.path.exists() and self.path.stat().st_size and not self.path.read_bytes().endswith(b"\n"):
            with self.path.open("a") as out:  # a line cut off by a kill: ours start on a line of their own
                out.write("\n")
        logger = logging.getLogger(f"lightning_lars.mlperf.{self.path.resolve()}")
        logger.propagate, logger.handlers = False, []  # into the file only, not the console
        logger.setLevel(logging.INFO)
        logger.addHandler(logging.FileHandler(self.path, mode="a"))
        if self.round.startswith("0.6"):  # v0.6's own line format: the only one its checker parses
            self._mllog = mlperf.V06Logger(logger)
        else:  # file names in the metadata relative to the folder holding callbacks/ (checkout or site-packages)
            self._mllog = MLLogger(
                logger=logger, default_stack_offset=2, root_dir=str(Path(__file__).parents[2])
            )
        if self._logged_before:
            rank_zero_info(f"[lightning-lars] MLPerf log continues: {self.path}")

    def _log(self, kind: str, key: str, value=None, time_ms: int | None = None, **metadata) -> None:
        if self._mllog is None:
            if self._pending is not None:  # before on_train_start: written then, at this time
                self._pending.append((kind, key, value, metadata, int(time.time() * 1e3)))  # mllog's clock
            return
        number = next((metadata[k] for k in NUMBERING if k in metadata), None)
        if (key, number) in self._logged_before:  # written before the resume: a replayed step
            return
        getattr(self._mllog, kind)(key=key, value=value, metadata=metadata or None, time_ms=time_ms)

    # -- the run -------------------------------------------------------------------------------------------
    def setup(self, trainer, pl_module, stage):
        if stage != "fit" or self._mllog is not None:
            return
        # Lightning sets trainer.ckpt_path after setup (when it restores): the log opens at on_train_start
        self._pending = [] if self.round is not None and trainer.is_global_zero else None
        self._log("event", "cache_clear", True)
        self._log("start", "init_start")
        s = self.settings
        platform = s.get("platform") or f"{trainer.world_size}x{trainer.strategy.root_device.type.upper()}"
        for key, value in (
            ("submission_org", s.get("org")),
            ("submission_platform", platform),
            ("submission_division", s.get("division")),
            ("submission_status", s.get("status")),
            ("submission_benchmark", s.get("benchmark")),
            ("submission_poc_name", s.get("poc_name")),
            ("submission_entry", s.get("entry")),
        ):
            self._log("event", key, value)

    def on_train_start(self, trainer, pl_module):
        if self._mllog is None and self._pending is not None:
            self._open(trainer)  # the checkpoint is restored: trainer.ckpt_path names a resumed run's folder
            pending, self._pending = self._pending, None
            for kind, key, value, metadata, time_ms in pending:
                self._log(kind, key, value, time_ms=time_ms, **metadata)
        if self._mllog is None:  # no mlperf.round, another rank, or no mlperf-logging: nothing to write
            return
        self._steps_seen = trainer.global_step
        for key, value in self.hyperparameters(trainer, pl_module).items():
            self._log("event", key, value)
        self._log("end", "init_stop")
        self._log("start", "run_start")

    def hyperparameters(self, trainer, pl_module) -> dict:
        """The submission's hyperparameter keys, read from the running optimizer, schedule and data."""
        data = trainer.datamodule
        accumulation = trainer.accumulate_grad_batches
        optimizer = trainer.optimizers[0]
        name = mlperf.optimizer_name(optimizer)
        values = {
            "global_batch_size": data.batch_size * trainer.world_size * accumulation,
            "train_samples": data.num_train_images,
            "eval_samples": _evaluated_images(trainer, data),
            "opt_name": name,
        }
        spans = [getattr(m, "group_size", None) or data.batch_size for _, m in batch_norms(pl_module.model)]
        if spans:
            values["model_bn_span"] = spans[0]
        if not self.round.startswith("0."):
            values["gradient_accumulation_steps"] = accumulation
        if name == "lars":
            values.update(mlperf.lars_keys(optimizer, pl_module.lr_schedule, self.round))
        return values

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if self._mllog is None:  # no mlperf.round, another rank, or no mlperf-logging: nothing to write
            return
        if self._stopped:
            return
        epoch = math.floor(self._epochs(trainer, trainer.global_step) + 1e-9) + 1  # the epoch this step is in
        if self._block is None:
            first, count = self._block_at(trainer, trainer.global_step)
            self._log("start", "block_start", first_epoch_num=first, epoch_count=count)
            self._block = first
        if self._epoch is None:
            self._log("start", "epoch_start", epoch_num=epoch)
            self._epoch = epoch

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if self._mllog is None:  # no mlperf.round, another rank, or no mlperf-logging: nothing to write
            return
        if trainer.global_step == self._steps_seen or self._stopped:  # mid-accumulation, or after run_stop
            return
        self._steps_seen = step = trainer.global_step
        done = self._epochs(trainer, step) >= self._epoch - 1e-9 if self._epoch else False
        if self._epoch is not None and (done or step >= trainer.max_steps > 0):
            self._log("end", "epoch_stop", epoch_num=self._epoch)
            self._epoch = None

    def _evaluating(self, trainer) -> bool:
        return not (trainer.sanity_checking or trainer.state.fn != "fit" or self._stopped)

    def on_validation_start(self, trainer, pl_module):
        if self._mllog is None:  # no mlperf.round, another rank, or no mlperf-logging: nothing to write
            return
        if self._evaluating(trainer):
            self._log("start", "eval_start", epoch_num=self._eval_epoch(trainer))

    def on_validation_end(self, trainer, pl_module):
        if self._mllog is None:  # no mlperf.round, another rank, or no mlperf-logging: nothing to write
            return
        if not self._evaluating(trainer) or "val/top1" not in trainer.callback_metrics:
            return
        epoch, top1 = self._eval_epoch(trainer), float(trainer.callback_metrics["val/top1"])
        self._log("event", "eval_accuracy", top1, epoch_num=epoch)
        self._log("end", "eval_stop", epoch_num=epoch)
        if self._block is not None:
            self._log("end", "block_stop", first_epoch_num=self._block)
            self._block = None
        target = getattr(find_callback(trainer, TimeToTarget), "target_top1", None)
        if target is not None and 100.0 * top1 >= target:
            self._stop("success")

    def on_train_end(self, trainer, pl_module):
        if self._mllog is None:  # no mlperf.round, another rank, or no mlperf-logging: nothing to write
            return
        self._stop("aborted")  # ended below the target (a signal raises instead: no train end, no run_stop)

    def _stop(self, status: str) -> None:
        if not self._stopped:
            self._log("end", "run_stop", status=status)
            self._stopped = True

    # -- epochs in MLPerf's count --------------------------------------------------------------------------
    @staticmethod
    def _epochs(trainer, step: int) -> float:
        schedule = find_callback(trainer, EvaluationSchedule)
        if schedule is None or schedule.epoch_at is None:
            return step / max(1, trainer.num_training_batches // trainer.accumulate_grad_batches)
        return float(schedule.epoch_at(step))

    def _eval_epoch(self, trainer) -> int:
        """The 1-based epoch just trained: an evaluation after epoch 35 is ``epoch_num`` 35."""
        return max(1, math.ceil(self._epochs(trainer, trainer.global_step) - 1e-9))

    def _block_at(self, trainer, step: int) -> tuple[int, int]:
        """(first epoch, epoch count) of the block holding ``step``: from the epoch after the evaluation at or
        before ``step`` to the epoch of the next one. The same whatever step it is asked at: a resumed run
        names the block as the first attempt did."""
        schedule = find_callback(trainer, EvaluationSchedule)
        evals = sorted(schedule.eval_steps) if schedule is not None else []
        before = max((s for s in evals if s <= step), default=0)
        after = min((s for s in evals if s > step), default=trainer.max_steps)
        first = math.floor(self._epochs(trainer, before) + 1e-9) + 1
        last = max(first, math.ceil(self._epochs(trainer, after) - 1e-9))
        return first, last - first + 1


def _evaluated_images(trainer, data) -> int:
    """Val images one evaluation sees: all of them, or what ``trainer.limit_val_batches`` leaves."""
    limit, total = trainer.limit_val_batches, data.num_val_images
    if isinstance(limit, int):
        return min(total, limit * data.batch_size * trainer.world_size)
    return int(total * limit)


def _events(path: Path) -> set[tuple[str, float | None]]:
    """(key, epoch number or None) of every event already in the log at ``path``."""
    seen: set[tuple[str, float | None]] = set()
    if not path.exists():
        return seen
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            event = mlperf.parse_line(line)
        except (
            IndexError,
            ValueError,
            KeyError,
            TypeError,
            AttributeError,
        ):  # cut off by a kill: nothing to skip
            continue
        if event is None:  # not an event
            continue
        metadata = event.get("metadata") or {}
        seen.add((event["key"], next((metadata[k] for k in NUMBERING if k in metadata), None)))
    return seen
