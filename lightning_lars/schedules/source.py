"""LR and weight-decay schedules written as the MLPerf and TPU sources compute them (frozen, step -> value).

`lightning_lars.schedules.lr` holds the textbook shapes; the record runs computed theirs with quirks that move
values by more than 0.1 % at named steps, so each source gets its own class here:

- MXNet (NVIDIA, Fujitsu) asks its scheduler for MXNet's ``num_update``, which is 1 at the first update:
  our 0-based ``step`` is ``num_update - 1``.
- TensorFlow (Google's MLPerf code, tensorflow/tpu) warms up on ``current_epoch = global_step / (N / B)``
  (a float) and decays with ``tf.train.polynomial_decay`` over ``train_steps - w_steps + 1`` steps, its
  ``end_learning_rate`` defaulting to 0.0001. TF's ``global_step`` inside the schedule is our ``step``.

Phases as in `lightning_lars.schedules.phases`: ``warmup_steps`` and ``decay_end_step`` where each source puts
them (TF's ``w_steps = epochs * N // B``, Fujitsu's explicit ``decay_steps``), not epochs x steps per epoch.
``steps_per_epoch`` is the source's count, ``epoch_length`` in the recipe.
"""

from __future__ import annotations

from dataclasses import dataclass

from lightning_lars.schedules.phases import EpochClock, LRSchedule


@dataclass(frozen=True, kw_only=True)
class MXNetPoly(LRSchedule):
    """NVIDIA's ``PolySchedule`` (MLPerf v0.6 and v1.0 MXNet ``common/fit.py``) at ``num_update = step + 1``::

        num_update <= warmup:  peak * num_update / warmup
        otherwise:             end + (peak - end) * (1 - (num_update - warmup) / decay)^power

    reaching ``end_lr`` at ``num_update = warmup + decay``, the run's last update.

    ``from_epochs`` counts both phases in epochs of the run's clock: the warmup's ``warmup_epochs`` and the decay
    until ``total_epochs`` (the source's ``NUMEPOCHS``, kept when ``debug=toy`` shortens the run to one epoch of
    the demo data, as TF's ``train_steps`` is), so a toy run shrinks warmup and decay together. Cut at the toy's
    one epoch instead, the 33-epoch warmup outlasted the run and the decay was clamped to one step.
    """

    warmup_steps: int
    decay_steps: int
    end_lr: float = 1e-4
    power: float = 2.0

    def __post_init__(self):
        if self.warmup_steps <= 0:
            raise ValueError(
                f"MXNet's PolySchedule needs a warmup of at least one step, got {self.warmup_steps}"
            )

    @property
    def decay_end_step(self) -> int:
        return self.warmup_steps + self.decay_steps

    def __call__(self, step: int) -> float:
        update = step + 1
        if update <= self.warmup_steps:
            return self.peak_lr * update / self.warmup_steps
        progress = min(update - self.warmup_steps, self.decay_steps) / self.decay_steps
        return self.end_lr + (self.peak_lr - self.end_lr) * (1.0 - progress) ** self.power

    @classmethod
    def from_epochs(
        cls,
        clock: EpochClock,
        peak_lr: float,
        *,
        warmup_epochs: int,
        total_epochs: float | None = None,
        end_lr: float = 1e-4,
        power: float = 2.0,
    ) -> MXNetPoly:
        """``mxnet_poly.yaml``: ``warmup = warmup_epochs x steps_per_epoch``, the decay until ``total_epochs``
        (None: the run's end), at least one step (a schedule of your own shorter than its warmup)."""
        warmup = clock.steps(warmup_epochs)
        total = clock.steps(clock.total_epochs if total_epochs is None else total_epochs)
        return cls(
            peak_lr=peak_lr,
            steps_per_epoch=clock.steps_per_epoch,
            warmup_steps=warmup,
            decay_steps=max(total - warmup, 1),
            end_lr=end_lr,
            power=power,
        )


def tf_polynomial_decay(
    global_step: int,
    *,
    learning_rate: float,
    decay_steps: int,
    end_learning_rate: float = 0.0001,
    power: float = 1.0,
) -> float:
    """``tf.train.polynomial_decay`` (cycle=False), with TF's default ``end_learning_rate`` of 0.0001."""
    step = min(global_step, decay_steps)
    return (learning_rate - end_learning_rate) * (1.0 - step / decay_steps) ** power + end_learning_rate


@dataclass(frozen=True, kw_only=True)
class TFLarsPoly(LRSchedule):
    """``poly_rate_schedule`` of the TF LARS code (tensorflow/tpu ``lars_util.py``; Google MLPerf v0.6/v0.7).

    ``current_epoch = step / (N / B)``; ``w_steps = warmup_epochs * N // B``::

        current_epoch <= warmup_epochs:  peak * current_epoch / warmup_epochs
        otherwise:  polynomial_decay(peak, max(1, step - w_steps), total_steps - w_steps + 1, end_lr, power)

    The decay denominator is ``total_steps - w_steps + 1`` (logged as ``lars_opt_learning_rate_decay_steps``),
    so the LR never reaches ``end_lr`` within the run: ``decay_end_step`` is one past it.

    ``total_steps`` is the source's ``train_steps``, counted at the source's ``N_s / B_s`` steps per TF epoch
    (``source_num_train_images``, ``source_global_batch``); the warmup counts epochs of the run's ``N / B``. A run
    on other data or another batch (``debug=toy``: 5,000 images in batches of 64) spans the same TF epochs: its
    ``train_steps`` is ``total_steps x (N / B) / (N_s / B_s)``, rounded; without the source's counts, or at
    them, it is ``total_steps`` itself. Kept at the source's, a toy run's 31-epoch warmup (2,421 steps of 64 of
    5,000 images) outlasted the 1,738 steps and left a negative decay length.
    """

    warmup_epochs: int
    total_steps: int
    num_train_images: int
    global_batch: int
    end_lr: float = 0.0001
    power: float = 2.0
    source_num_train_images: int | None = None
    source_global_batch: int | None = None

    @property
    def train_steps(self) -> int:
        """The source's ``train_steps`` in this run's steps (the class docstring)."""
        if self.source_num_train_images is None or self.source_global_batch is None:
            return self.total_steps
        ratio = (self.num_train_images / self.global_batch) / (
            self.source_num_train_images / self.source_global_batch
        )
        return int(round(self.total_steps * ratio))

    @property
    def warmup_steps(self) -> int:
        """TF's ``w_steps = warmup_epochs * N // B``: 977 at 32K over 25 epochs, not 25 x 39 = 975."""
        return int(self.warmup_epochs * self.num_train_images // self.global_batch)

    @property
    def decay_end_step(self) -> int:
        return self.warmup_steps + (self.train_steps - self.warmup_steps + 1)

    def __call__(self, step: int) -> float:
        current_epoch = step / (self.num_train_images / self.global_batch)
        if current_epoch <= self.warmup_epochs:
            return self.peak_lr * current_epoch / self.warmup_epochs
        warmup_steps = self.warmup_steps
        return tf_polynomial_decay(
            max(1, step - warmup_steps),
            learning_rate=self.peak_lr,
            decay_steps=self.train_steps - warmup_steps + 1,
            end_learning_rate=self.end_lr,
            power=self.power,
        )

    @classmethod
    def from_epochs(
        cls,
        clock: EpochClock,
        peak_lr: float,
        *,
        warmup_epochs: int,
        total_steps: int,
        num_train_images: int,
        global_batch: int,
        end_lr: float = 0.0001,
        power: float = 2.0,
        source_num_train_images: int | None = 1281167,  # ILSVRC-2012 train, what the TF sources trained on
        source_global_batch: int | None = None,
    ) -> TFLarsPoly:
        """``tf_lars_poly.yaml``: the source's own counts (N, B, train_steps), not the clock's."""
        return cls(
            peak_lr=peak_lr,
            steps_per_epoch=clock.steps_per_epoch,
            warmup_epochs=warmup_epochs,
            total_steps=total_steps,
            num_train_images=num_train_images,
            global_batch=global_batch,
            end_lr=end_lr,
            power=power,
            source_num_train_images=source_num_train_images,
            source_global_batch=source_global_batch,
        )


def _fujitsu_decay(
    step: int, warmup_steps: int, decay_steps: int, end_lr_ratio: float, power: float
) -> float:
    """Explorer ``decay_power`` with ``decay_after_warmup`` and ``smooth_decay`` (per iteration), clipped."""
    current = min(max(step - warmup_steps, 0), decay_steps)
    return (1.0 - end_lr_ratio) * (1.0 - current / decay_steps) ** power + end_lr_ratio


@dataclass(frozen=True, kw_only=True)
class FujitsuLR(LRSchedule):
    """Fujitsu's MLPerf v0.6 LR: MXNet's linear warmup times the explorer's decay coefficient (``best_coeff``).

    MXNet's ``MultiFactorScheduler`` gives ``peak * num_update / warmup`` while ``num_update < warmup``, then
    ``peak`` (``num_update = step + 1``); ``explorer.py`` multiplies it by
    ``(1 - r) * (1 - c / decay_steps)^power + r`` with ``c = clip(step - warmup, 0, decay_steps)`` and
    ``r = end_lr_ratio``: flat at ``peak * r`` after the decay, which ends at ``warmup + decay_steps``
    (540 + 780 = 1320 in the 86k run of 1350 steps).
    """

    warmup_steps: int
    decay_steps: int
    end_lr_ratio: float
    power: float

    @property
    def decay_end_step(self) -> int:
        return self.warmup_steps + self.decay_steps

    def __call__(self, step: int) -> float:
        update = step + 1
        base = self.peak_lr * update / self.warmup_steps if update < self.warmup_steps else self.peak_lr
        return base * _fujitsu_decay(step, self.warmup_steps, self.decay_steps, self.end_lr_ratio, self.power)

    @classmethod
    def from_epochs(
        cls,
        clock: EpochClock,
        peak_lr: float,
        *,
        warmup_epochs: int,
        decay_steps: int,
        end_lr_ratio: float,
        power: float,
        source_steps_per_epoch: int | None = None,
    ) -> FujitsuLR:
        """``fujitsu.yaml``: the explorer's ``warmup_step = warmup_epochs x steps_per_epoch``; ``decay_steps``
        counted at the source's ``source_steps_per_epoch`` become as many of this run's epochs (None: kept as
        steps), so a toy run of other epochs shrinks warmup and decay together."""
        if source_steps_per_epoch is not None:
            decay_steps = max(1, round(decay_steps * clock.steps_per_epoch / source_steps_per_epoch))
        return cls(
            peak_lr=peak_lr,
            steps_per_epoch=clock.steps_per_epoch,
            warmup_steps=clock.steps(warmup_epochs),
            decay_steps=decay_steps,
            end_lr_ratio=end_lr_ratio,
            power=power,
        )


@dataclass(frozen=True, kw_only=True)
class FujitsuWeightDecay:
    """Fujitsu's weight-decay coefficient (``best_wd_coeff``): the explorer's warmup ramp times its decay.

    ``apply_wd_warmup`` sets the ramp to ``step / warmup`` while ``step < warmup`` and then leaves it at its
    last value, ``(warmup - 1) / warmup``; the decay is the LR's (``wd_decay = -1``: use ``lr_decay``).
    ``warmup_steps`` is the explorer's ``warmup_step`` (steps per epoch x warmup epochs, fit.py).
    """

    warmup_steps: int
    decay_steps: int
    end_lr_ratio: float
    power: float

    @property
    def decay_end_step(self) -> int:
        return self.warmup_steps + self.decay_steps

    def __call__(self, step: int) -> float:
        ramp = min(step, self.warmup_steps - 1) / self.warmup_steps
        return ramp * _fujitsu_decay(step, self.warmup_steps, self.decay_steps, self.end_lr_ratio, self.power)
