"""The schemas of the groups that set up the run around the optimization: the data module, the strategy, the
optional callbacks (conf/callbacks/default.yaml, one schema per entry; the technique callbacks a recipe adds name
theirs in its defaults) and the logger. Registered with the optimizer's and the scheduler's in
`lightning_lars.config.groups`, which says how they are used.

``ALSO_TAKES = ("**",)``: any further key is the user's own, added with ``+`` as in a group without a schema (the
``_target_`` takes ``**kwargs``, or arguments this config never sets, and says so when it is built); the node
stays closed, so a misspelt key without ``+`` is refused.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, ClassVar

from omegaconf import MISSING

# A field's bounds, which `lightning_lars.config.rules` checks as the config is composed (OmegaConf types a field
# but has no range): a lower bound, ``at_least`` or ``above`` (exclusive), and optionally an upper one, ``at_most``
# or ``below`` (exclusive); ``what`` names a value that is no integer count, ``note`` says what is usual.
POSITIVE = {"at_least": 1}

Number = float | int


class Compression(StrEnum):
    bf16 = "bf16"
    fp16 = "fp16"


class Order(StrEnum):
    """FFCV's traversal order of the train set."""

    random = "random"
    quasi_random = "quasi_random"
    sequential = "sequential"


class Decode(StrEnum):
    cpu = "cpu"
    device = "device"


@dataclass
class Pipeline:
    """The ops of each split, in order (`lightning_lars.data.pipelines`)."""

    train: list[Any] = MISSING
    val: list[Any] = MISSING


@dataclass
class Data:
    _target_: str = MISSING


@dataclass
class FFCVDemoData(Data):
    ALSO_TAKES: ClassVar[tuple[str, ...]] = (
        *("order", "os_cache", "no_aug_from_epoch", "batches_ahead", "holdout", "holdout_seed"),
    )
    train_path: str = MISSING  # a .beton file
    val_path: str = MISSING
    num_classes: int = field(default=MISSING, metadata=POSITIVE)
    num_workers: int | None = MISSING  # null: this process's CPU share
    resolution: int = MISSING  # train images' side, px
    val_resolution: int = MISSING
    decode: Decode = MISSING  # device: FFCV hands over stored bytes; batches decode and crop on the device
    pipeline: Pipeline = field(default_factory=Pipeline)
    prepare_command: str | None = MISSING  # the command that writes the .beton files


@dataclass
class FFCVImageNetData(Data):
    ALSO_TAKES: ClassVar[tuple[str, ...]] = ("no_aug_from_epoch", "batches_ahead", "holdout", "holdout_seed")
    train_path: str = MISSING
    val_path: str = MISSING
    num_classes: int = field(default=MISSING, metadata=POSITIVE)
    num_workers: int | None = MISSING
    resolution: int = MISSING
    val_resolution: int = MISSING
    order: Order = MISSING
    os_cache: bool = MISSING  # one page-cache copy shared by every rank of the node
    decode: Decode = MISSING  # device: FFCV hands over stored bytes; batches decode and crop on the device
    pipeline: Pipeline = field(default_factory=Pipeline)
    prepare_command: str | None = MISSING  # the command that writes the .beton files


@dataclass
class ImageFolderData(Data):
    ALSO_TAKES: ClassVar[tuple[str, ...]] = ("pin_memory", "no_aug_from_epoch", "prepare_command")
    root: str = MISSING  # <root>/train/<class>/<image> and <root>/val/<class>/<image>
    num_classes: int = field(default=MISSING, metadata=POSITIVE)
    num_workers: int | None = MISSING  # null: the machine's cores / devices per node
    resolution: int = MISSING
    val_resolution: int = MISSING
    decode: Decode = MISSING  # device: workers read bytes; batches decode and crop on the device
    pipeline: Pipeline = field(default_factory=Pipeline)


@dataclass
class DemoImageFolderData(ImageFolderData):
    ALSO_TAKES: ClassVar[tuple[str, ...]] = ("pin_memory", "no_aug_from_epoch")
    prepare_command: str | None = MISSING


@dataclass
class SyntheticData(Data):
    ALSO_TAKES: ClassVar[tuple[str, ...]] = ("val_resolution", "pipeline", "pool_size", "no_aug_from_epoch")
    num_classes: int = field(default=MISSING, metadata=POSITIVE)
    resolution: int = MISSING
    num_train_images: int = MISSING
    num_val_images: int = MISSING


@dataclass
class AutoStrategy:
    name: str = MISSING  # Lightning's choice: one device, or DDP over several


@dataclass
class DDPStrategy:
    ALSO_TAKES: ClassVar[tuple[str, ...]] = ("**",)  # any keyword of torch's DistributedDataParallel
    _target_: str = MISSING
    gradient_as_bucket_view: bool = MISSING  # grads live in the buckets: one copy less per step


@dataclass
class CommHook:
    _target_: str = MISSING
    _partial_: bool = MISSING  # the function itself, not a call of it


@dataclass
class GroupedState:
    _target_: str = MISSING
    group_caps_mb: list[Any] | None = MISSING  # MiB per all-reduce, in backward order; the last repeats
    compression: Compression | None = MISSING
    compute_grad_norms: bool = MISSING  # true: LARS/LAMB take per-parameter grad norms from the hook


@dataclass
class TopologyState:
    _target_: str = MISSING
    group_caps_mb: list[Any] | None = MISSING
    grid: list[int] | None = MISSING  # [nodes, devices_per_node]; null: the launch's
    compression: Compression | None = MISSING
    compute_grad_norms: bool = MISSING


@dataclass
class BucketedDDPStrategy:
    ALSO_TAKES: ClassVar[tuple[str, ...]] = ("**",)
    _target_: str = MISSING
    bucket_cap_mb: Number = MISSING  # DDP's own buckets (MiB), which the hook groups
    gradient_as_bucket_view: bool = MISSING
    optimizer_sharding: bool = MISSING  # true: each rank updates 1/N of the tensors (Kumar et al. 2019)
    ddp_comm_hook: CommHook = field(default_factory=CommHook)
    ddp_comm_state: GroupedState = field(default_factory=GroupedState)


@dataclass
class TopologyDDPStrategy(BucketedDDPStrategy):
    ddp_comm_state: TopologyState = field(default_factory=TopologyState)  # type: ignore[assignment]


@dataclass
class FSDP1Strategy:
    ALSO_TAKES: ClassVar[tuple[str, ...]] = ("**",)  # any keyword of Lightning's FSDPStrategy
    _target_: str = MISSING
    min_params_per_unit: int = MISSING  # modules of at least this many parameters are wrapped


@dataclass
class FSDP2Strategy:
    ALSO_TAKES: ClassVar[tuple[str, ...]] = ("**",)  # any keyword of Lightning's ModelParallelStrategy
    _target_: str = MISSING
    reshard_after_forward: bool = MISSING  # ZeRO-3 style; false keeps gathered params for backward
    precision: Any = MISSING  # the trainer's (an int or a string such as 16-mixed)


@dataclass
class TargetOnlyCallback:
    """throughput, neumann_evaluation, bn_without_moving_average: configured by their `_target_` alone."""

    ALSO_TAKES: ClassVar[tuple[str, ...]] = ("**",)
    _target_: str = MISSING


@dataclass
class CheckpointCallback:
    ALSO_TAKES: ClassVar[tuple[str, ...]] = ("**",)
    _target_: str = MISSING
    dirpath: str | None = MISSING
    save_last: bool = MISSING
    every_n_epochs: int | None = MISSING
    save_on_train_epoch_end: bool = MISSING  # at the end of each pass over the data
    every_n_train_steps: int | None = MISSING  # also every N optimizer steps


@dataclass
class EveryNStepsCallback:
    """progress, hparams, trust_ratio: sampled every N optimizer steps; null: trainer.log_every_n_steps."""

    ALSO_TAKES: ClassVar[tuple[str, ...]] = ("**",)
    _target_: str = MISSING
    every_n_steps: int | None = MISSING


@dataclass
class DivergenceCallback:
    ALSO_TAKES: ClassVar[tuple[str, ...]] = ("**",)
    _target_: str = MISSING
    check_every_n_steps: int | None = MISSING  # null: trainer.log_every_n_steps
    explosion_factor: Number = MISSING  # window-mean loss over this factor x the best window mean
    min_steps: int = MISSING  # optimizer steps before explosions are judged


@dataclass
class TimeToTargetCallback:
    ALSO_TAKES: ClassVar[tuple[str, ...]] = ("**",)
    _target_: str = MISSING
    target_top1: Number | None = MISSING  # percent; null: record evaluations only
    stop_at_target: bool = MISSING


@dataclass
class MLPerfLogCallback:
    ALSO_TAKES: ClassVar[tuple[str, ...]] = ("**",)
    _target_: str = MISSING
    settings: Any = MISSING  # the root's mlperf section
    dirpath: str | None = MISSING


@dataclass
class BatchSizeControlCallback:
    """A recipe names it first in its defaults: ``/batch_size_control_callback_schema@callbacks.batch_size_control``."""

    _target_: str = MISSING
    growth: dict[int, int] = MISSING  # epoch: the batch's factor from that epoch on
    scale_lr: bool = MISSING  # true: the LR grows with the batch


@dataclass
class RMSpropWarmupCallback:
    _target_: str = MISSING
    center_epochs: Number = MISSING  # the SGD share's ELU centre, in epochs
    period_epochs: Number = MISSING


@dataclass
class FujitsuWeightDecaySchedule:
    _target_: str = MISSING
    _partial_: bool = MISSING
    warmup_steps: int = field(default=MISSING, metadata=POSITIVE)
    decay_steps: int = MISSING
    end_lr_ratio: Number = MISSING
    power: Number = MISSING


@dataclass
class WeightDecayScheduleCallback:
    _target_: str = MISSING
    schedule: FujitsuWeightDecaySchedule = field(default_factory=FujitsuWeightDecaySchedule)


@dataclass
class WandbLogger:
    """Open: a recipe or debug file may set ``mode``, and W&B takes any further keyword."""

    ALSO_TAKES: ClassVar[tuple[str, ...]] = ("mode", "**")
    _target_: str = MISSING
    project: str = MISSING
    save_dir: str | None = MISSING
    name: str | None = MISSING
    probe_timeout_s: Number = MISSING  # s to wait for a TCP connection to the server
    init_timeout_s: Number = MISSING  # s wandb.init may take online before the run goes offline
