"""The root config's own sections as typed dataclasses, stored in Hydra's ConfigStore as ``train_schema``.

conf/train.yaml lists ``train_schema`` first in its defaults, so every YAML file and the command line merge into
these types: OmegaConf refuses a wrong type (``batch.global_size=abc``) or enum value (``epoch_length.mode=ragged``)
while Hydra composes. No field has a default (``MISSING``): train.yaml holds each value once, with the comment a
user reads; field order is the order ``--cfg job`` prints. What a type cannot state (a key Hydra's ``+`` adds, a
value left ``???``, the bounds in a field's ``metadata``, rules across fields) is `lightning_lars.config.rules`'s.
The groups are typed by the schema their file names (``model`` here, the others in `lightning_lars.config.groups`);
the trainer's keys are Lightning's ``Trainer(...)`` to judge.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from enum import Enum, StrEnum
from typing import Any, ClassVar

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, OmegaConf

from lightning_lars.config import groups  # noqa: F401  (stores the groups' schemas in the ConfigStore)
from lightning_lars.config.run_groups import POSITIVE

SCHEMA_NAME = "train_schema"
# torch.compile's modes a run may choose (`model.compile`); false: eager. reduce-overhead adds CUDA graphs: GPU only.
COMPILE_MODES = ("default", "max-autotune-no-cudagraphs", "reduce-overhead")
COMPILE_AUTO = "auto"
# MLPerf training rounds with a ResNet-50 benchmark (v0.6, June 2019, to v4.0, June 2024; v4.1 dropped it)
# written as MLPerf's rulesets name them: members named by their text, so `mlperf.round=1.0.0` is a choice
MLPERF_ROUNDS = ("0.6.0", "0.7.0", "1.0.0", "1.1.0", "2.0.0", "2.1.0", "3.0.0", "3.1.0", "4.0.0")
MLPerfRound = StrEnum("MLPerfRound", [(name, name) for name in MLPERF_ROUNDS], module=__name__)


class EpochMode(Enum):
    drop_last = "drop_last"
    padded = "padded"
    fixed = "fixed"


@dataclass
class BatchConfig:
    global_size: int = field(default=MISSING, metadata=POSITIVE)
    max_per_device: int = field(default=MISSING, metadata=POSITIVE)  # images per forward pass on one device
    bn_group: int | None = field(default=MISSING, metadata=POSITIVE)


@dataclass
class RunConfig:
    ckpt_path: str | None = MISSING
    validate_at_end: bool = MISSING


@dataclass
class EpochLengthConfig:
    mode: EpochMode = MISSING
    workers: int | None = field(default=MISSING, metadata=POSITIVE)
    steps: int | None = field(default=MISSING, metadata=POSITIVE)
    num_train_images: int = field(default=MISSING, metadata=POSITIVE)


@dataclass
class EvaluationConfig:
    every_n_epochs: int | None = field(default=MISSING, metadata=POSITIVE)
    every_n_steps: int | None = field(default=MISSING, metadata=POSITIVE)
    offset_epochs: int = field(default=MISSING, metadata={"at_least": 0})
    offset_steps: int = field(default=MISSING, metadata={"at_least": 0})


@dataclass
class Deviation:
    technique: str = MISSING
    published: str = MISSING
    ours: str = MISSING
    why: str = MISSING


class MLPerfDivision(Enum):
    closed = "closed"
    open = "open"


class MLPerfStatus(Enum):
    research = "research"
    onprem = "onprem"
    cloud = "cloud"
    preview = "preview"


@dataclass
class MLPerfConfig:
    round: MLPerfRound | None = MISSING
    benchmark: str = MISSING
    division: MLPerfDivision = MISSING
    status: MLPerfStatus = MISSING
    org: str = MISSING
    platform: str | None = MISSING
    poc_name: str = MISSING
    entry: str = MISSING


@dataclass
class TrainConfig:
    recipe_name: str = MISSING
    # numpy's and Lightning's seed_everything take 0 .. 2**32 - 1
    seed: int = field(default=MISSING, metadata={"at_least": 0, "at_most": 2**32 - 1})
    batch: BatchConfig = field(default_factory=BatchConfig)
    run: RunConfig = field(default_factory=RunConfig)
    epoch_length: EpochLengthConfig = field(default_factory=EpochLengthConfig)
    evaluation: EvaluationConfig = field(default_factory=EvaluationConfig)
    deviations: list[Deviation] = MISSING
    mlperf: MLPerfConfig = field(default_factory=MLPerfConfig)
    published: dict[str, Any] = MISSING
    # the groups: typed by the schema their conf/<group>/*.yaml file names first (the trainer's: open)
    data: Any = None
    model: Any = None
    optimizer: Any = None
    scheduler: Any = None
    trainer: Any = None
    strategy: Any = None
    callbacks: Any = None
    logger: Any = None
    paths: Any = None


@dataclass
class ModelConfig:
    """conf/model/alexnet_bn.yaml's keys: `lightning_lars.training.module.ImageClassifier`'s arguments that a
    config sets (the optimizer and the schedule come from the plan). `ALSO_TAKES`: its other arguments, which a
    user may add (no field: ``--cfg job`` prints only what the YAML sets)."""

    ALSO_TAKES: ClassVar[tuple[str, ...]] = ("l2_in_loss", "model_kwargs")

    _target_: str = MISSING
    arch: str = MISSING  # a timm model name
    num_classes: int = MISSING  # ${data.num_classes}: resolved when the model is built
    exclusion_rule: str = MISSING  # tensors without weight decay and trust ratio (lightning_lars/optim)
    # the last BN gamma of each residual block at 0; None: no residual blocks
    zero_init_last: bool | None = MISSING
    fc_init_std: float | None = MISSING  # std of the classifier's normal init; None: timm's default
    label_smoothing: float = MISSING
    channels_last: bool = MISSING
    # false, auto or one of COMPILE_MODES. Typed Any, checked by `lightning_lars.config.rules`: OmegaConf 2.3 has no
    # bool-or-enum type, and an Enum field would refuse the plain `false` YAML and the command line give.
    compile: Any = MISSING


@dataclass
class ResNetModelConfig(ModelConfig):
    """conf/model/resnet.yaml's keys: the ResNet's, with TF's L2 term in the loss."""

    ALSO_TAKES: ClassVar[tuple[str, ...]] = ("model_kwargs",)

    l2_in_loss: float = MISSING  # weight of sum(l2_loss) over non-BN tensors added to the loss


store = ConfigStore.instance()
store.store(name=SCHEMA_NAME, node=TrainConfig)
# at the top level, not in a group: `--help` lists groups as choices, and these are no choice of the user's
store.store(name="alexnet_bn_model_schema", node=ModelConfig)
store.store(name="resnet_model_schema", node=ResNetModelConfig)


def also_takes(kind: type | None) -> tuple[str, ...]:
    """The keys a schema accepts beyond its fields; ``**``: any key, added with ``+``."""
    return getattr(kind, "ALSO_TAKES", ())


def unknown_key(key: str, kind: type | None = None, why: str = "") -> str:
    """The one message for a key nothing reads, with ``why`` or, under a schema, its keys."""
    if not why:
        keys = [f.name for f in dataclasses.fields(kind)] + [f"+{name}" for name in also_takes(kind)]
        why = f"nothing reads it; remove it or fix its spelling (its keys: {', '.join(keys)})"
    return f"unknown config key '{key}': {why}"


def plain(node: Any) -> Any:
    """``node`` resolved, as Python containers, its Enum values as text: what a ``_target_`` is given (a LARS
    ``form`` that is a str, not our Enum, in a checkpoint loaded with ``weights_only``)."""
    return OmegaConf.to_container(node, resolve=True, enum_to_str=True)
