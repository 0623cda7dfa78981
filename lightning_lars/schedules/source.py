"""LR and weight-decay schedules written as the MLPerf and TPU sources compute them, as pure ``step -> value``.

`lightning_lars.schedules.lr` holds the textbook shapes; the record runs computed theirs with quirks that move
values by more than 0.1 % at named steps, so each source gets its own function here:

- MXNet (NVIDIA, Fujitsu) asks its scheduler for MXNet's ``num_update``, which is 1 at the first update:
  our 0-based ``step`` is ``num_update - 1``.
- TensorFlow (Google's MLPerf code, tensorflow/tpu) warms up on ``current_epoch = global_step / (N / B)``
  (a float) and decays with ``tf.train.polynomial_decay`` over ``train_steps - w_steps + 1`` steps, its
  ``end_learning_rate`` defaulting to 0.0001. TF's ``global_step`` inside the schedule is our ``step``.

Signatures follow `lightning_lars.schedules.lr` (``peak_lr``, ``steps_per_epoch``, ``total_epochs`` bound by
`schedules.build_lr_schedule`; ``steps_per_epoch`` is the source's count, ``epoch_length`` in the recipe).
"""

from __future__ import annotations


def mxnet_warmup_poly(
    step: int,
    *,
    peak_lr: float,
    steps_per_epoch: int,
    total_epochs: float,
    warmup_epochs: int,
    end_lr: float = 1e-4,
    power: float = 2.0,
) -> float:
    """NVIDIA's ``PolySchedule`` (MLPerf v0.6 and v1.0 MXNet ``common/fit.py``) at ``num_update = step + 1``.

    ``warmup = warmup_epochs * steps_per_epoch``, ``total = total_epochs * steps_per_epoch``::

        num_update <= warmup:  peak * num_update / warmup
        otherwise:             end + (peak - end) * (1 - (num_update - warmup) / (total - warmup))^power
    """
    warmup = warmup_epochs * steps_per_epoch
    if warmup <= 0:
        raise ValueError(f"need warmup_epochs x steps_per_epoch > 0, got {warmup}")
    decay = max(round(total_epochs * steps_per_epoch) - warmup, 1)  # >= 1: a run shorter than its warmup (toy)
    update = step + 1
    if update <= warmup:
        return peak_lr * update / warmup
    progress = min(update - warmup, decay) / decay
    return end_lr + (peak_lr - end_lr) * (1.0 - progress) ** power


def tf_polynomial_decay(global_step: int, *, learning_rate: float, decay_steps: int,
                        end_learning_rate: float = 0.0001, power: float = 1.0) -> float:
    """``tf.train.polynomial_decay`` (cycle=False), with TF's default ``end_learning_rate`` of 0.0001."""
    step = min(global_step, decay_steps)
    return (learning_rate - end_learning_rate) * (1.0 - step / decay_steps) ** power + end_learning_rate


def tf_lars_poly(
    step: int,
    *,
    peak_lr: float,
    steps_per_epoch: int,
    total_epochs: float,
    warmup_epochs: int,
    total_steps: int,
    num_train_images: int,
    global_batch: int,
    end_lr: float = 0.0001,
    power: float = 2.0,
) -> float:
    """``poly_rate_schedule`` of the TF LARS code (tensorflow/tpu ``lars_util.py``; Google MLPerf v0.6/v0.7).

    ``current_epoch = step / (N / B)``; ``w_steps = warmup_epochs * N // B``::

        current_epoch <= warmup_epochs:  peak * current_epoch / warmup_epochs
        otherwise:  polynomial_decay(peak, max(1, step - w_steps), total_steps - w_steps + 1, end_lr, power)

    The decay denominator is ``total_steps - w_steps + 1`` (logged as ``lars_opt_learning_rate_decay_steps``),
    so the LR never reaches ``end_lr`` within the run.
    """
    current_epoch = step / (num_train_images / global_batch)
    if current_epoch <= warmup_epochs:
        return peak_lr * current_epoch / warmup_epochs
    warmup_steps = warmup_epochs * num_train_images // global_batch
    decay_steps = total_steps - warmup_steps + 1
    return tf_polynomial_decay(max(1, step - warmup_steps), learning_rate=peak_lr, decay_steps=decay_steps,
                               end_learning_rate=end_lr, power=power)


def _tf_lars_poly_phases(*, warmup_epochs, total_steps, num_train_images, global_batch, **_) -> tuple[int, int]:
    """TF's ``w_steps = warmup_epochs * N // B`` (977 at 32K over 25 epochs, not 25 x 39 = 975), and the step
    where ``polynomial_decay`` over ``total_steps - w_steps + 1`` steps would reach ``end_lr``: one past the run."""
    warmup_steps = warmup_epochs * num_train_images // global_batch
    return warmup_steps, warmup_steps + (total_steps - warmup_steps + 1)


tf_lars_poly.phase_steps = _tf_lars_poly_phases  # read by schedules.phase_steps for the card and the plan


def _fujitsu_decay(step: int, warmup_steps: int, decay_steps: int, end_lr_ratio: float, power: float) -> float:
    """Explorer ``decay_power`` with ``decay_after_warmup`` and ``smooth_decay`` (per iteration), clipped."""
    current = min(max(step - warmup_steps, 0), decay_steps)
    return (1.0 - end_lr_ratio) * (1.0 - current / decay_steps) ** power + end_lr_ratio


def fujitsu_lr(
    step: int,
    *,
    peak_lr: float,
    steps_per_epoch: int,
    total_epochs: float,
    warmup_epochs: int,
    decay_steps: int,
    end_lr_ratio: float,
    power: float,
) -> float:
    """Fujitsu's MLPerf v0.6 LR: MXNet's linear warmup times the explorer's decay coefficient (``best_coeff``).

    ``warmup = warmup_epochs * steps_per_epoch``. MXNet's ``MultiFactorScheduler`` gives
    ``peak * num_update / warmup`` while ``num_update < warmup``, then ``peak`` (``num_update = step + 1``);
    ``explorer.py`` multiplies it by ``(1 - r) * (1 - c / decay_steps)^power + r`` with
    ``c = clip(step - warmup, 0, decay_steps)`` and ``r = end_lr_ratio``: flat at ``peak * r`` after the decay.
    """
    warmup = warmup_epochs * steps_per_epoch
    update = step + 1
    base = peak_lr * update / warmup if update < warmup else peak_lr
    return base * _fujitsu_decay(step, warmup, decay_steps, end_lr_ratio, power)


def _fujitsu_lr_phases(*, warmup_epochs, steps_per_epoch, decay_steps, **_) -> tuple[int, int]:
    """The explorer's ``warmup_step`` and the end of its decay, ``warmup_step + decay_steps``: 540 + 780 = 1320
    in the 86k run, after which the LR stays flat at ``peak * end_lr_ratio`` until the run ends (1350)."""
    warmup_steps = warmup_epochs * steps_per_epoch
    return warmup_steps, warmup_steps + decay_steps


fujitsu_lr.phase_steps = _fujitsu_lr_phases  # read by schedules.phase_steps for the card and the plan


def fujitsu_wd_coefficient(
    step: int,
    *,
    warmup_steps: int,
    decay_steps: int,
    end_lr_ratio: float,
    power: float,
) -> float:
    """Fujitsu's weight-decay coefficient (``best_wd_coeff``): the explorer's warmup ramp times its decay.

    ``apply_wd_warmup`` sets the ramp to ``step / warmup`` while ``step < warmup`` and then leaves it at its
    last value, ``(warmup - 1) / warmup``; the decay is the LR's (``wd_decay = -1``: use ``lr_decay``).
    ``warmup_steps`` is the explorer's ``warmup_step`` (steps per epoch x warmup epochs, fit.py).
    """
    warmup = warmup_steps
    ramp = min(step, warmup - 1) / warmup
    return ramp * _fujitsu_decay(step, warmup, decay_steps, end_lr_ratio, power)
