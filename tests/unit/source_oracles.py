"""The sources' schedule code, transcribed: oracles for the technique tests and the golden tables.

Each is the source's own computation re-written in Python (statefully where the source keeps state), never a
call into lightning_lars: NVIDIA's MXNet ``PolySchedule`` driven by MXNet's ``num_update``; tensorflow/tpu's
``poly_rate_schedule`` with ``tf.train.polynomial_decay``; Fujitsu's ``Explorer`` loop with MXNet's
``MultiFactorScheduler``. Step convention: index ``s`` of a returned list is the value applied at update ``s``
(0-based), TF's ``global_step`` and Lightning's ``global_step`` alike.
"""

from __future__ import annotations

import math

N = 1_281_167  # ILSVRC-2012 train images (every log's train_samples / num_train_examples)


class MXNetPolySchedule:
    """training_results_v0.6 NVIDIA/.../mxnet/common/fit.py ``PolySchedule`` (v1.0 adds the power argument)."""

    def __init__(self, base_lr, iterations, warmup_iterations, end_lr, power):
        self.base_lr, self.iterations, self.warmup_iterations = base_lr, iterations, warmup_iterations
        self.end_lr, self.power = end_lr, power

    def __call__(self, iteration):
        if iteration <= self.warmup_iterations:
            return self.base_lr * (iteration / self.warmup_iterations)
        polyit = iteration - self.warmup_iterations
        polytotal = self.iterations - self.warmup_iterations
        return self.end_lr + ((self.base_lr - self.end_lr) * (1 - (polyit / polytotal)) ** self.power)


def mxnet_lrs(scheduler, updates):
    """MXNet ``Optimizer._update_count`` then ``lr_scheduler(self.num_update)``: num_update is 1 at update 1."""
    return [scheduler(num_update) for num_update in range(1, updates + 1)]


def tf_poly_rate_schedule(global_step, *, plr, w_epochs, train_steps, batch_size, end_lr=0.0001):
    """tensorflow/tpu lars_util.py ``poly_rate_schedule`` (Google MLPerf v0.6/v0.7 alike), TF ops in Python."""
    steps_per_epoch = N / batch_size  # resnet_main.py: float
    current_epoch = global_step / steps_per_epoch
    wrate = plr * current_epoch / w_epochs
    w_steps = w_epochs * N // batch_size
    decay_steps = max(1, global_step - w_steps)  # tf.maximum(min_step, global_step - w_steps)
    decay_total = train_steps - w_steps + 1
    step = min(decay_steps, decay_total)  # tf.train.polynomial_decay, cycle=False
    poly_rate = (plr - end_lr) * (1 - step / decay_total) ** 2.0 + end_lr
    return wrate if current_epoch <= w_epochs else poly_rate  # tf.where(current_epoch <= w_epochs, ...)


class FujitsuExplorerLoop:
    """training_results_v0.6 Fujitsu: fit.py ``mlperf_fit`` per batch, ``explorer.py`` with --smooth_decay True,
    --decay_after_warmup True, --lr_decay_mode/--wd_decay_mode power, --wd_warmup True, --burn_in 0, and MXNet's
    ``MultiFactorScheduler`` (steps far beyond the run, linear warmup) asked at ``num_update``."""

    def __init__(self, lr, epoch_size, warmup_epochs, decay_steps, end_lr_ratio, power):
        self.lr, self.warmup_step, self.decay_steps = lr, epoch_size * warmup_epochs, decay_steps
        self.end_lr_ratio, self.power = end_lr_ratio, power
        self.current_iter, self.num_update = 0, 0
        self.decay_ratio = self.wd_decay_ratio = self.wd_warmup_ratio = 1.0
        self.warmup_stride = 1.0 / self.warmup_step

    def _decay(self):
        current = max(self.current_iter - self.warmup_step, 0)
        current = min(current, self.decay_steps)
        ratio = (1.0 - self.end_lr_ratio) * math.pow(
            1.0 - current / self.decay_steps, self.power
        ) + self.end_lr_ratio
        return max(self.end_lr_ratio, ratio) if self.current_iter > self.warmup_step else ratio

    def update(self):
        """One batch: apply_lr_decay_iter, apply_wd_decay_iter, apply_wd_warmup, apply_burn_in, then update()."""
        self.decay_ratio = self._decay()
        self.wd_decay_ratio = self._decay()
        if self.current_iter < self.warmup_step:
            self.wd_warmup_ratio = self.current_iter * self.warmup_stride
        self.current_iter += 1
        self.num_update += 1
        sched = (
            self.lr * self.num_update / self.warmup_step if self.num_update < self.warmup_step else self.lr
        )
        return (
            sched * self.decay_ratio,
            self.wd_warmup_ratio * self.wd_decay_ratio,
        )  # lr x best_coeff, best_wd_coeff

    def run(self, updates):
        """(lr, best_wd_coeff) for updates 0 .. updates-1."""
        return [self.update() for _ in range(updates)]


def nus_polynomial_warmup(step, *, base_lr, warmup_steps, decay_steps, end_lr=0.0, power=2.0):
    """NUS-HPC-AI-Lab/LARS-ImageNet-PyTorch utils.py ``PolynomialWarmup`` as pytorch_imagenet_resnet.py drives it:
    built with last_epoch=-1 (its constructor's step makes last_epoch 0), ``lr_schedules.step()`` after every
    update, so update ``step`` runs at last_epoch ``step``. ``WarmupScheduler.get_lr``: last_epoch / warmup x lr
    below warmup; from warmup on, ``PolynomialDecay`` over ``decay_steps - warmup_steps`` whose own last_epoch is 0
    at the warmup's end: (lr - end) (1 - min(k, total) / total) ^ power + end."""
    if step < warmup_steps:
        return step / warmup_steps * base_lr
    total = decay_steps - warmup_steps
    return (base_lr - end_lr) * (1 - min(step - warmup_steps, total) / total) ** power + end_lr
