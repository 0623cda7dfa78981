"""FSDP strategies for LARS/LAMB recipes: FSDP2 and FSDP1, on CPU/gloo and GPU/NCCL, with BatchNorm handled.

Layer-wise optimizers need whole-parameter norms and the true shape of every parameter. Under FSDP2 the
parameters are DTensors and our LARS/LAMB (``lightning_lars.optim.norms.global_norms``) reduce the shards'
sums of squares in one all-reduce. Under FSDP1 with ``use_orig_params=True`` Lightning wraps the model
*before* it calls ``configure_optimizers``, and each parameter is then a 1-D slice of a flat shard (empty,
with ``grad=None``, on ranks that hold none of it). :class:`FSDP1Strategy` therefore tags every parameter
with its original shape right after wrapping (``param_groups.record_unsharded_shapes``: the exclusion rule
sees conv weights as 4-D, not 1-D) and sets ``optimizer.shard_group``, with which LARS/LAMB all-reduce one
vector of norms over all their parameters in group order (zeros where a rank holds nothing).

BatchNorm: ``fully_shard`` shards BN gamma/beta like any other parameter (whole-parameter norms keep
LARS right), but leaves the running-statistics buffers per rank and unsynchronised (DDP would broadcast
rank 0's each step). Both strategies average ``running_mean``/``running_var`` over the data-parallel ranks
before every validation and every checkpoint, so all ranks evaluate, and the checkpoint stores, the same
statistics. Batch statistics in training stay per device (BN span = per-device batch, as in the records).
Under mixed precision keep BN in fp32: Lightning's precision plugins autocast, which runs BN in fp32.

Checkpoints load as data only (`load_data_only`): Lightning's FSDP readers do not restrict themselves.
"""

import functools

import lightning.pytorch as pl
import torch
import torch.distributed as dist
from lightning.pytorch.strategies import FSDPStrategy, ModelParallelStrategy
from lightning.pytorch.utilities.model_helpers import is_overridden
from torch.distributed.fsdp import FullyShardedDataParallel, fully_shard
from torch.distributed.fsdp.wrap import size_based_auto_wrap_policy

from lightning_lars.core.errors import UserError
from lightning_lars.models.batch_norm import average_bn_statistics
from lightning_lars.optim.param_groups import record_unsharded_shapes
from lightning_lars.parallel import safe_checkpoint

FP16_MIXED = ("16-mixed", "16")  # Lightning's names for fp16 autocast + GradScaler


def repeated_blocks(root: torch.nn.Module) -> list[torch.nn.Module]:
    """Shard units for FSDP2, children first: every element of an ``nn.Sequential``/``nn.ModuleList`` that
    holds parameters (timm ResNet bottlenecks, ViT blocks), then every parameter-holding child of ``root``.

    One visible rule instead of a per-architecture class list; the LightningModule itself is never a unit.
    """
    units = []
    for parent in reversed(list(root.modules())):  # post-order-ish: inner containers before outer ones
        if isinstance(parent, (torch.nn.Sequential, torch.nn.ModuleList)):
            units += [child for child in parent.children() if any(True for _ in child.parameters())]
    units += [child for child in root.children() if any(True for _ in child.parameters())]
    return list(dict.fromkeys(units))  # a root that is itself a Sequential lists its children twice


class FSDP2Strategy(ModelParallelStrategy):
    """Pure data-parallel FSDP2 (``fully_shard``) over all ranks, on CPU/gloo or GPU/NCCL.

    Lightning's ``ModelParallelStrategy`` expects the LightningModule's ``configure_model`` to shard the
    model; when the module has none, this strategy shards :func:`repeated_blocks` itself.

    Args:
        reshard_after_forward: free gathered parameters after forward (ZeRO-3); False keeps them for
            backward (ZeRO-2: more memory, one all-gather less per unit).
        precision: the trainer's precision (the config passes ``${trainer.precision}``), checked here so
            that an fp16 recipe stops before anything starts: ``16-mixed`` needs a loss scaler whose
            overflow decision all ranks share, which Lightning's ``ModelParallelStrategy`` does not have
            (it refuses ``16-mixed`` itself, with a message about Fabric, once the Trainer is built).
        **kwargs: as for ``ModelParallelStrategy`` (``save_distributed_checkpoint``, ``timeout``, ...).
    """

    def __init__(self, reshard_after_forward: bool = True, precision: str | int | None = None, **kwargs):
        if str(precision) in FP16_MIXED:
            raise UserError(
                f"trainer.precision={precision} (fp16 with loss scaling) does not run under strategy=fsdp2:"
                " set trainer.precision=bf16-mixed (same memory, no loss scaler), or keep fp16 with"
                " strategy=ddp_bucketed or strategy=fsdp1"
            )
        kwargs.setdefault("tensor_parallel_size", 1)
        super().__init__(**kwargs)
        self.reshard_after_forward = reshard_after_forward

    def setup_environment(self) -> None:
        # "auto" would mean data parallel over nodes and tensor parallel inside a node: we shard over all.
        self._data_parallel_size = self.num_nodes * self.num_processes
        super().setup_environment()

    def setup(self, trainer: "pl.Trainer") -> None:
        module = self.lightning_module
        if not is_overridden("configure_model", module):
            mesh = self.device_mesh["data_parallel"]
            for unit in repeated_blocks(module):
                fully_shard(unit, mesh=mesh, reshard_after_forward=self.reshard_after_forward)
            # ModelParallelStrategy insists on a configure_model; the sharding above is ours.
            module.configure_model = lambda: None
        super().setup(trainer)

    def _data_parallel_group(self) -> dist.ProcessGroup:
        return self.device_mesh["data_parallel"].get_group()

    def on_validation_start(self) -> None:
        average_bn_statistics(self.lightning_module, self._data_parallel_group())
        super().on_validation_start()

    def lightning_module_state_dict(self):
        average_bn_statistics(self.lightning_module, self._data_parallel_group())
        return super().lightning_module_state_dict()

    def load_checkpoint(self, checkpoint_path, weights_only: bool | None = None) -> dict:
        return load_data_only(super().load_checkpoint, self.broadcast(checkpoint_path))


class FSDP1Strategy(FSDPStrategy):
    """FSDP1 (``FullyShardedDataParallel``) set up for layer-wise optimizers, on GPUs and on CPU/gloo.

    Lightning's own ``FSDPStrategy`` refuses CPU (and hands FSDP1 ``device_id=None``, which FSDP1 refuses
    without an accelerator); here the CPU case wraps with ``device_id=torch.device("cpu")``, so the same
    strategy runs in CPU tests with Lightning's real order of calls (wrap, then ``configure_optimizers``).

    Args:
        min_params_per_unit: wrap every module with at least this many parameters (size-based policy).
        **kwargs: as for Lightning's ``FSDPStrategy``; ``use_orig_params`` is forced on.
    """

    def __init__(self, min_params_per_unit: int = 1_000_000, **kwargs):
        kwargs.setdefault(
            "auto_wrap_policy",
            functools.partial(size_based_auto_wrap_policy, min_num_params=min_params_per_unit),
        )
        kwargs["use_orig_params"] = True  # one tensor per parameter for LARS/LAMB, not flat shards
        if kwargs.get("sharding_strategy", "FULL_SHARD") not in ("FULL_SHARD", "SHARD_GRAD_OP"):
            raise UserError(
                "strategy=fsdp1 supports sharding_strategy FULL_SHARD or SHARD_GRAD_OP (shards over all ranks)"
            )
        super().__init__(**kwargs)

    def _setup_model(self, model: torch.nn.Module) -> torch.nn.Module:
        if self.root_device.type == "cpu" and not any(
            isinstance(m, FullyShardedDataParallel) for m in model.modules()
        ):
            model = FullyShardedDataParallel(
                model,
                cpu_offload=self.cpu_offload,
                mixed_precision=self.mixed_precision_config,
                sharding_strategy=self.sharding_strategy,
                device_id=torch.device("cpu"),
                **self.kwargs,
            )
            self.kwargs.pop("auto_wrap_policy", None)  # applied above; Lightning would warn it is ignored
        model = super()._setup_model(model)
        record_unsharded_shapes(model)  # before configure_optimizers builds the param groups
        return model

    def setup(self, trainer: "pl.Trainer") -> None:
        super().setup(trainer)
        use_shard_group(self.optimizers, dist.group.WORLD)  # FULL_SHARD/SHARD_GRAD_OP shard over every rank

    def on_validation_start(self) -> None:
        average_bn_statistics(self.lightning_module)
        super().on_validation_start()

    def lightning_module_state_dict(self):
        average_bn_statistics(self.lightning_module)
        return super().lightning_module_state_dict()

    def load_checkpoint(self, checkpoint_path, weights_only: bool | None = None) -> dict:
        return load_data_only(super().load_checkpoint, self.broadcast(checkpoint_path))


def load_data_only(load, path) -> dict:
    """Lightning's FSDP load of ``path`` with ``weights_only=True``, after `safe_checkpoint.check`: Lightning
    reads shards with torch's unrestricted reader and a whole file (FSDP1) with a plain unpickler."""
    safe_checkpoint.check(path)
    with safe_checkpoint.data_only(path):
        return load(path, weights_only=True)


def use_shard_group(optimizers: list[torch.optim.Optimizer], group: dist.ProcessGroup) -> None:
    """Tell every optimizer that has a ``shard_group`` attribute (LARS, LAMB) that its plain-tensor parameters
    are FSDP1 shards spread over ``group``; other optimizers need no norms and are left alone."""
    for optimizer in optimizers:
        if hasattr(optimizer, "shard_group"):
            optimizer.shard_group = group
