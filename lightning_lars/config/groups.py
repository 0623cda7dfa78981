"""The groups a recipe chooses (optimizer, scheduler; data, strategy, callbacks and logger from
`lightning_lars.config.run_groups`) as typed dataclasses, one per conf/<group>/<name>.yaml, stored in Hydra's
ConfigStore as ``<name>_<group>_schema`` and listed first in that file's defaults, as `lightning_lars.config.schema`
is in train.yaml's. A class's fields are its file's keys in the file's order; ``ALSO_TAKES`` names the other
arguments of its ``_target_`` that a recipe or the command line may add: a node with such keys is left open (not
struct), and `lightning_lars.config.rules` refuses any other key. tests/unit/test_schema.py holds fields +
ALSO_TAKES equal to the ``_target_``'s signature; a ``_target_``'s own default is either absent or the YAML's
(tests/unit/test_one_default_home.py).

Numbers are ``float | int``: OmegaConf keeps ``base_lr: 10`` as written (a ``float`` field would print 10.0). A list
of numbers is ``list[Any]``: OmegaConf 2.3 hands a ``list[float | int]``'s items back as nodes, not numbers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, ClassVar

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, OmegaConf

from lightning_lars.config import run_groups

Number = float | int
# A learning rate <= 0 "trains" and diverges or stands still; a warmup may start from 0 and a decay end at 0.
LEARNING_RATE = {"above": 0, "what": "a learning rate"}
LEARNING_RATE_OR_0 = {"at_least": 0, "what": "a learning rate"}
# SGD's, LARS's and RMSprop's momentum buffer grows without bound at 1 (torch's SGD takes 1)
MOMENTUM = {
    "at_least": 0,
    "below": 1,
    "what": "momentum",
    "note": "0.9 is the usual; 1 never forgets a gradient",
}


class Implementation(StrEnum):
    """How LARS and LAMB run their step (`lightning_lars.optim.compiled`)."""

    eager = "eager"  # foreach ops
    compiled = "compiled"  # one torch.compile'd kernel set (20 s to minutes of compiling at the first step)


class LarsForm(StrEnum):
    """Where LARS applies the LR (`lightning_lars.optim.lars.LARS`)."""

    nvidia = "nvidia"  # outside the momentum buffer
    mlperf = "mlperf"  # inside it
    you2017 = "you2017"  # inside it, every tensor adapted and decayed
    fujitsu = "fujitsu"  # inside it, the decay not scaled by the LR


class UpdateRule(StrEnum):
    FR = "FR"  # Fletcher-Reeves
    PR = "PR"  # Polak-Ribiere


class Preconditioner(StrEnum):
    bfgs = "bfgs"  # diagonal BFGS
    none = "none"


class LineSearch(StrEnum):
    step = "step"  # loss checks every line_search_period steps
    none = "none"


@dataclass
class Optimizer:
    """Keys every optimizer file sets; the LR comes from the schedule, the parameters from the model."""

    _target_: str = MISSING
    _partial_: bool = MISSING  # a function of the parameters, called when the model is built


@dataclass
class SGDOptimizer(Optimizer):
    ALSO_TAKES: ClassVar[tuple[str, ...]] = ("dampening", "maximize", "foreach", "differentiable", "fused")
    momentum: Number = field(default=MISSING, metadata=MOMENTUM)
    nesterov: bool = MISSING
    weight_decay: Number = MISSING  # on tensors the model's exclusion rule keeps


@dataclass
class LarsOptimizer(Optimizer):
    momentum: Number = field(default=MISSING, metadata=MOMENTUM)
    weight_decay: Number = MISSING  # on tensors the exclusion rule keeps; 0 on the excluded ones
    trust_coefficient: Number = MISSING  # eta
    eps: Number = MISSING
    nesterov: bool = MISSING
    form: LarsForm = MISSING
    clip: bool = MISSING  # LARC: per-layer LR = min(lr, eta * ||w|| / (||g|| + wd * ||w|| + eps))
    implementation: Implementation = MISSING


@dataclass
class LambOptimizer(Optimizer):
    ALSO_TAKES: ClassVar[tuple[str, ...]] = ("bias_correction",)
    betas: list[Any] = MISSING
    eps: Number = MISSING
    weight_decay: Number = MISSING  # decoupled
    max_grad_norm: Number = MISSING  # global gradient-norm clip before the moments
    implementation: Implementation = MISSING


@dataclass
class NeumannOptimizer(Optimizer):
    alpha: Number = MISSING  # cubic regularizer
    beta: Number = MISSING  # repulsive regularizer, times the number of variables
    gamma: Number = MISSING  # moving average
    mu_min: Number = MISSING
    mu_max: Number = MISSING
    momentum_time_unit: int = MISSING  # optimizer steps per unit of the momentum schedule's t
    sgd_steps: int = MISSING  # SGD warm-up steps
    reset_steps: int = MISSING  # first period between resets, in steps
    reset_growth: int = MISSING  # factor each period grows by after a reset
    weight_decay: Number = MISSING


@dataclass
class NlcgOptimizer(Optimizer):
    update_rule: UpdateRule = MISSING
    precondition: Preconditioner = MISSING
    line_search: LineSearch = MISSING
    line_search_period: int = MISSING  # steps between loss checks
    line_search_threshold: Number = MISSING  # scales the 1 %..15 % loss bands
    trust_coefficient: Number = MISSING  # 0: LARS off
    weight_decay: Number = MISSING


@dataclass
class RmspropWarmupOptimizer(Optimizer):
    rmsprop_lr: Number = field(default=MISSING, metadata=LEARNING_RATE)
    momentum: Number = field(default=MISSING, metadata=MOMENTUM)
    alpha: Number = MISSING  # RMSprop's moving-average decay
    eps: Number = MISSING
    weight_decay: Number = MISSING


@dataclass
class Scheduler:
    """A schedule's constructor with its shape keys (`lightning_lars.schedules.build`); ``base_lr`` is the LR at
    ``base_batch`` images per step, scaled linearly to the global batch."""

    _target_: str = MISSING
    _partial_: bool = MISSING
    base_lr: Number = field(default=MISSING, metadata=LEARNING_RATE)
    base_batch: int = MISSING


@dataclass
class FujitsuScheduler(Scheduler):
    warmup_epochs: Number = MISSING
    decay_steps: int = MISSING  # steps of decay after warmup; then flat at base_lr x end_lr_ratio
    source_steps_per_epoch: int | None = MISSING  # the source's epoch in steps: decay_steps keep their epochs
    end_lr_ratio: Number = MISSING
    power: Number = MISSING


@dataclass
class MxnetPolyScheduler(Scheduler):
    warmup_epochs: Number = MISSING
    total_epochs: Number | None = MISSING  # the source's NUMEPOCHS; None: trainer.max_epochs
    end_lr: Number = field(default=MISSING, metadata=LEARNING_RATE_OR_0)
    power: Number = MISSING


@dataclass
class PiecewiseScheduler(Scheduler):
    boundaries: list[Any] = MISSING  # epochs
    multipliers: list[Any] = MISSING  # one more than boundaries
    warmup_epochs: Number = MISSING
    start_lr: Number = field(default=MISSING, metadata=LEARNING_RATE_OR_0)


@dataclass
class TfLarsPolyScheduler(Scheduler):
    warmup_epochs: Number = MISSING
    total_steps: int = MISSING  # the source's train_steps: the schedule's length
    num_train_images: int = MISSING
    global_batch: int = MISSING
    source_num_train_images: int | None = MISSING  # N and B at which the source counted total_steps: a run of
    source_global_batch: int | None = MISSING  # other N / B (debug=toy) spans the same TF epochs
    end_lr: Number = field(default=MISSING, metadata=LEARNING_RATE_OR_0)
    power: Number = MISSING


@dataclass
class WarmupCaffePolyScheduler(Scheduler):
    warmup_epochs: Number = MISSING
    start_lr: Number = field(default=MISSING, metadata=LEARNING_RATE_OR_0)
    power: Number = MISSING


@dataclass
class WarmupLinearScheduler(Scheduler):
    warmup_epochs: Number = MISSING
    start_lr: Number = field(default=MISSING, metadata=LEARNING_RATE_OR_0)
    end_lr: Number = field(default=MISSING, metadata=LEARNING_RATE_OR_0)
    warmup_steps: int | None = MISSING  # lengths in steps where the source publishes steps
    total_steps: int | None = MISSING


@dataclass
class WarmupPolyScheduler(Scheduler):
    warmup_epochs: Number = MISSING
    start_lr: Number = field(default=MISSING, metadata=LEARNING_RATE_OR_0)
    end_lr: Number = field(default=MISSING, metadata=LEARNING_RATE_OR_0)
    power: Number = MISSING


@dataclass
class WarmupPolyStepsScheduler(Scheduler):
    warmup_steps: int = MISSING
    total_steps: int = MISSING
    start_lr: Number = field(default=MISSING, metadata=LEARNING_RATE_OR_0)
    end_lr: Number = field(default=MISSING, metadata=LEARNING_RATE_OR_0)
    power: Number = MISSING


@dataclass
class WarmupStepScheduler(Scheduler):
    warmup_epochs: Number = MISSING
    start_lr: Number = field(default=MISSING, metadata=LEARNING_RATE_OR_0)
    milestones: list[Any] = MISSING  # epochs
    gamma: Number = MISSING  # LR factor at each milestone


SCHEMAS: dict[str, dict[str, type]] = {
    "optimizer": {
        "sgd": SGDOptimizer,
        "lars": LarsOptimizer,
        "lamb": LambOptimizer,
        "neumann": NeumannOptimizer,
        "nlcg": NlcgOptimizer,
        "rmsprop_warmup": RmspropWarmupOptimizer,
    },
    "scheduler": {
        "fujitsu": FujitsuScheduler,
        "mxnet_poly": MxnetPolyScheduler,
        "piecewise": PiecewiseScheduler,
        "tf_lars_poly": TfLarsPolyScheduler,
        "warmup_caffe_poly": WarmupCaffePolyScheduler,
        "warmup_linear": WarmupLinearScheduler,
        "warmup_poly": WarmupPolyScheduler,
        "warmup_poly_steps": WarmupPolyStepsScheduler,
        "warmup_step": WarmupStepScheduler,
    },
    "data": {
        "demo": run_groups.FFCVDemoData,
        "imagenet": run_groups.FFCVImageNetData,
        "imagefolder": run_groups.ImageFolderData,
        "demo_imagefolder": run_groups.DemoImageFolderData,
        "synthetic": run_groups.SyntheticData,
    },
    "strategy": {
        "auto": run_groups.AutoStrategy,
        "ddp": run_groups.DDPStrategy,
        "ddp_bucketed": run_groups.BucketedDDPStrategy,
        "ddp_hierarchical": run_groups.TopologyDDPStrategy,
        "ddp_torus2d": run_groups.TopologyDDPStrategy,
        "fsdp1": run_groups.FSDP1Strategy,
        "fsdp2": run_groups.FSDP2Strategy,
    },
    "callback": {
        "throughput": run_groups.TargetOnlyCallback,
        "checkpoint": run_groups.CheckpointCallback,
        "progress": run_groups.EveryNStepsCallback,
        "hparams": run_groups.EveryNStepsCallback,
        "trust_ratio": run_groups.EveryNStepsCallback,
        "divergence": run_groups.DivergenceCallback,
        "time_to_target": run_groups.TimeToTargetCallback,
        "neumann_evaluation": run_groups.TargetOnlyCallback,
        "mlperf_log": run_groups.MLPerfLogCallback,
        # the technique callbacks a recipe adds
        "batch_size_control": run_groups.BatchSizeControlCallback,
        "rmsprop_warmup": run_groups.RMSpropWarmupCallback,
        "weight_decay_schedule": run_groups.WeightDecayScheduleCallback,
        "bn_without_moving_average": run_groups.TargetOnlyCallback,
    },
    "logger": {"wandb": run_groups.WandbLogger},
}


def schema_name(group: str, name: str) -> str:
    return f"{name}_{group}_schema"


def store_all() -> None:
    """At the top level, not in a group: ``--help`` lists groups as choices, and these are no choice of the
    user's. A class with ``ALSO_TAKES`` is stored open, so a recipe file may add those keys."""
    store = ConfigStore.instance()
    for group, schemas in SCHEMAS.items():
        for name, schema in schemas.items():
            node = OmegaConf.structured(schema)
            if set(getattr(schema, "ALSO_TAKES", ())) - {"**"}:  # keys a file may add
                OmegaConf.set_struct(node, False)
            store.store(name=schema_name(group, name), node=node)


store_all()
