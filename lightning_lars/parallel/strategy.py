"""DDP strategy that registers our gradient communication hook on every device, CPU/gloo included.

Lightning's ``DDPStrategy(ddp_comm_hook=...)`` registers the hook only when the root device is CUDA; on
CPU it is silently ignored (0 calls). :class:`BucketedDDPStrategy` registers it itself, so the same recipe
runs the same communication schedule on a laptop (gloo) and on a cluster (NCCL).
"""

import inspect
import warnings
from collections.abc import Callable

import lightning.pytorch as pl
from lightning.pytorch.strategies import DDPStrategy
from torch.nn.parallel import DistributedDataParallel

from lightning_lars.core.errors import UserError
from lightning_lars.parallel.bucket_hook import grouped_allreduce_hook, register
from lightning_lars.parallel.sharded_update import ShardedUpdate


def supports_bucket_cap_mb_list() -> bool:
    """Whether this torch's DDP takes per-bucket size limits (``bucket_cap_mb_list``, torch >= 2.13)."""
    return "bucket_cap_mb_list" in inspect.signature(DistributedDataParallel.__init__).parameters


class BucketedDDPStrategy(DDPStrategy):
    """``DDPStrategy`` whose comm hook (default :func:`grouped_allreduce_hook`) runs on CPU and CUDA alike.

    Args:
        ddp_comm_hook: ``(state, bucket) -> Future[Tensor]``; a Hydra ``_partial_: true`` of a function
            works (DDP checks the parameter names, which ``functools.partial`` keeps).
        ddp_comm_state: the hook's state, e.g. :class:`~lightning_lars.parallel.bucket_hook.GroupedAllReduceState`.
            If it has ``compute_grad_norms=True``, the state is handed to every optimizer that has a
            ``grad_norm_source`` attribute (our LARS), which then pops per-parameter gradient norms
            from it instead of recomputing them.
        optimizer_sharding: each rank updates only its share of the tensors and the weights are
            all-gathered (:class:`~lightning_lars.parallel.sharded_update.ShardedUpdate`); optimizer state
            per rank shrinks to about 1/world size. Checkpoints hold the full state.
        **kwargs: as for Lightning's ``DDPStrategy``; unknown ones go to ``DistributedDataParallel``
            (``bucket_cap_mb``, ``bucket_cap_mb_list``, ``gradient_as_bucket_view``, ``static_graph``).
    """

    def __init__(
        self,
        ddp_comm_hook: Callable | None = grouped_allreduce_hook,
        ddp_comm_state=None,
        optimizer_sharding: bool = False,
        **kwargs,
    ):
        self.optimizer_sharding = optimizer_sharding
        if kwargs.get("bucket_cap_mb_list") is not None:
            if not supports_bucket_cap_mb_list():
                raise UserError(
                    "this torch's DistributedDataParallel has no bucket_cap_mb_list (torch >= 2.13): "
                    "drop strategy.bucket_cap_mb_list and let the hook group buckets (strategy.ddp_comm_state)"
                )
            kwargs["bucket_cap_mb_list"] = [float(cap) for cap in kwargs["bucket_cap_mb_list"]]
        if ddp_comm_hook is not None and ddp_comm_state is None:
            raise UserError("strategy.ddp_comm_hook needs strategy.ddp_comm_state (the hook's settings)")
        if ddp_comm_hook is not None and not hasattr(ddp_comm_hook, "__name__"):
            # A Hydra `_partial_: true` is a functools.partial, which has no __name__/__qualname__;
            # DDP's register_comm_hook reads both, so give the partial its function's names.
            ddp_comm_hook.__name__ = ddp_comm_hook.func.__name__
            ddp_comm_hook.__qualname__ = ddp_comm_hook.func.__qualname__
        super().__init__(ddp_comm_hook=ddp_comm_hook, ddp_comm_state=ddp_comm_state, **kwargs)

    def _register_ddp_hooks(self) -> None:
        """Register the hook whatever the device (the parent does so only on CUDA)."""
        if self._ddp_comm_hook is None:
            return
        assert isinstance(self.model, DistributedDataParallel)
        hook = self._ddp_comm_hook
        if hasattr(self._ddp_comm_state, "set_launch_grid"):  # 2D-torus / hierarchical: nodes x devices
            self._ddp_comm_state.set_launch_grid(self.num_nodes, self.num_processes)
        if self._ddp_comm_wrapper is not None:
            hook = self._ddp_comm_wrapper(hook)
        register(self.model, self._ddp_comm_state, hook)

    def setup(self, trainer: "pl.Trainer") -> None:
        super().setup(trainer)
        if getattr(self._ddp_comm_state, "compute_grad_norms", False):
            self._share_grad_norms(trainer)
        if self.optimizer_sharding and self.optimizers:  # after sharing: the inner optimizer takes the norms
            self.optimizers = [ShardedUpdate(opt) for opt in self.optimizers]

    def _share_grad_norms(self, trainer: "pl.Trainer") -> None:
        """Let optimizers read the hook's gradient norms; refuse where the gradients change after backward."""
        reason = None
        if trainer.gradient_clip_val:
            reason = "trainer.gradient_clip_val rescales gradients after the hook"
        elif getattr(self.precision_plugin, "scaler", None) is not None:
            reason = "the fp16 loss scaler unscales gradients after the hook"
        takers = [opt for opt in self.optimizers if hasattr(opt, "grad_norm_source")]
        if reason is None and not takers:
            reason = "no optimizer has a grad_norm_source attribute (LARS has it)"
        if reason is not None:
            warnings.warn(f"ddp_comm_state.compute_grad_norms=true has no effect: {reason}", stacklevel=2)
            self._ddp_comm_state.compute_grad_norms = False
            return
        for optimizer in takers:
            optimizer.grad_norm_source = self._ddp_comm_state
