"""Batch norm over a chosen number of samples: ghost BN, synchronised BN groups, BN without moving averages.

Every record fixes how many samples one BN statistic spans (Goyal: each GPU's 32; Google's TPU runs: 128 or
64 over several chips; Fujitsu: 42 per GPU). On other hardware the per-device batch differs, so the span is
restored explicitly (`lightning_lars.schedules.scaling.plan_batch` picks a device batch where that is possible):

- span < device batch: **ghost BN** (Hoffer et al. 2017): the device batch is cut into consecutive groups of
  ``span`` samples, each normalised with its own mean and variance.
- span > device batch: one statistic over ``span / device batch`` consecutive ranks, as SyncBatchNorm with a
  process group, but with a differentiable all-reduce of sums that works on gloo (CPU) as on NCCL.

`GroupBatchNorm` does both (and plain BN); `convert_batch_norm` swaps it in for every BatchNorm of a model,
sharing the same gamma/beta tensors and buffers.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.modules.batchnorm import _BatchNorm

from lightning_lars.core.errors import UserError


class AllReduceSum(torch.autograd.Function):
    """Sum over ``group``'s ranks, differentiable: the gradient of a sum all-reduce is the all-reduce of the
    gradients. Built on torch's functional collectives, which torch.compile traces into the graph;
    ``torch.distributed.nn.functional.all_reduce`` (the eager form) raises under torch.compile and breaks the
    graph at every synced BN layer."""

    @staticmethod
    def forward(ctx, tensor: Tensor, group: dist.ProcessGroup) -> Tensor:
        ctx.group = group
        return funcol.wait_tensor(funcol.all_reduce(tensor, "sum", group))

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor, None]:
        return funcol.wait_tensor(funcol.all_reduce(grad.contiguous(), "sum", ctx.group)), None


class GroupBatchNorm(_BatchNorm):
    """BatchNorm whose training statistics span exactly ``group_size`` samples.

    Args:
        num_features, eps, momentum, affine, track_running_stats: as ``torch.nn.BatchNorm2d``.
        group_size: samples per statistic; None = the whole device batch (plain BN).
        process_group: if set, one statistic spans this group's ranks: each rank contributes its whole
            device batch (``group_size`` must then equal ranks x device batch).

    Training: with G = batch / group_size groups, ``y[g] = (x[g] - mean_g) / sqrt(var_g + eps) * gamma + beta``
    (biased variance, as BN). Running statistics move once per forward towards the average over the G groups
    of the group means and unbiased variances. Eval: the running statistics, as plain BN.
    Input: (N, C, ...) of any rank (conv feature maps, or (N, C) after a linear layer).
    """

    def __init__(
        self,
        num_features: int,
        eps: float = 1e-5,
        momentum: float | None = 0.1,
        affine: bool = True,
        track_running_stats: bool = True,
        group_size: int | None = None,
        process_group: dist.ProcessGroup | None = None,
        device=None,
        dtype=None,
    ):
        super().__init__(num_features, eps, momentum, affine, track_running_stats, device, dtype)
        if group_size is not None and group_size <= 0:
            raise UserError(f"BN group size must be positive, got {group_size}")
        self.group_size = group_size
        self.process_group = process_group

    def _check_input_dim(self, x: Tensor) -> None:
        if x.dim() < 2:
            raise ValueError(f"expected input of shape (N, C, ...), got {tuple(x.shape)}")

    def extra_repr(self) -> str:
        return (
            f"{super().extra_repr()}, group_size={self.group_size}, synced={self.process_group is not None}"
        )

    def forward(self, x: Tensor) -> Tensor:
        self._check_input_dim(x)
        if not self.training and self.track_running_stats:
            return F.batch_norm(
                x, self.running_mean, self.running_var, self.weight, self.bias, False, 0.0, self.eps
            )
        if self.process_group is None:
            return self._ghost(x)
        grouped, mean, var, count = self._statistics(x)
        shape = (1, 1, -1) + (1,) * (x.dim() - 2)
        y = (grouped - mean) * torch.rsqrt(var + self.eps)
        if self.affine:
            y = y * self.weight.view(shape) + self.bias.view(shape)
        if self.training and self.track_running_stats:
            self._update_running(mean, var, count)
        return y.reshape(x.shape)

    def _ghost(self, x: Tensor) -> Tensor:
        """Ghost (or plain) BN in ONE fused ``F.batch_norm``: the G sub-batches become G x C channels.

        x (G*n, C, ...) is viewed as (n, G*C, ...) (one copy, which BN saves for backward instead of x: the
        same activation memory as torch's BN; the Python form kept ~5 full-size intermediates). gamma/beta and
        the running statistics are repeated G times; BN moves each copy towards its sub-batch's mean and
        unbiased variance, and their average over G is written back: the running update of the class docstring.
        """
        n, channels = x.shape[:2]
        local = self._local_batch(n)
        if local == n:  # plain BN: torch's own kernel, nothing reshaped
            return F.batch_norm(
                x,
                self.running_mean,
                self.running_var,
                self.weight,
                self.bias,
                True,
                self._momentum_factor(),
                self.eps,
            )
        groups, rest = n // local, x.shape[2:]
        wide = (
            x.reshape(groups, local, channels, *rest).transpose(0, 1).reshape(local, groups * channels, *rest)
        )
        tracking = self.training and self.track_running_stats
        mean, var = (
            (self.running_mean.repeat(groups), self.running_var.repeat(groups)) if tracking else (None, None)
        )
        weight = self.weight.repeat(groups) if self.affine else None
        bias = self.bias.repeat(groups) if self.affine else None
        y = F.batch_norm(wide, mean, var, weight, bias, True, self._momentum_factor(), self.eps)
        if tracking:
            with torch.no_grad():
                self.running_mean.copy_(mean.view(groups, channels).mean(0))
                self.running_var.copy_(var.view(groups, channels).mean(0))
        return y.reshape(local, groups, channels, *rest).transpose(0, 1).reshape(x.shape)

    def _momentum_factor(self) -> float:
        """The running-statistics factor of this forward (and count it), as torch's ``_BatchNorm`` does."""
        if not (self.training and self.track_running_stats):
            return 0.0
        self.num_batches_tracked.add_(1)
        return 1.0 / float(self.num_batches_tracked) if self.momentum is None else self.momentum

    def _local_batch(self, n: int) -> int:
        """Samples per statistic on this device; refuses a group that does not divide the batch."""
        local = n if self.process_group is not None or self.group_size is None else self.group_size
        if n % local:
            raise UserError(
                f"BN group of {local} samples does not divide the device batch of {n}; the batch plan should"
                " have refused this: set batch.max_per_device to a multiple of batch.bn_group"
            )
        return local

    def _statistics(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor, int]:
        """x viewed as (groups, samples per group, C, ...), with per-group (mean, biased var) and the count of
        values behind each statistic."""
        n = x.shape[0]
        local = self._local_batch(n)
        grouped = x.reshape(n // local, local, *x.shape[1:])
        dims = (1,) + tuple(range(3, grouped.dim()))
        if self.process_group is None:
            var, mean = torch.var_mean(grouped, dim=dims, correction=0, keepdim=True)
            return grouped, mean, var, grouped[0].numel() // x.shape[1]
        # One statistic over the process group: all-reduce the sums, differentiably (gradients of a sum
        # all-reduce are all-reduced back, which is exactly the backward of BN over the concatenated batch).
        count = grouped[0].numel() // x.shape[1] * dist.get_world_size(self.process_group)
        sums = torch.cat([grouped.sum(dims, keepdim=True), grouped.square().sum(dims, keepdim=True)])
        sums = AllReduceSum.apply(sums, self.process_group)
        mean, mean_sq = sums[:1] / count, sums[1:] / count
        return grouped, mean, (mean_sq - mean.square()).clamp_min(0.0), count

    @torch.no_grad()
    def _update_running(self, mean: Tensor, var: Tensor, count: int) -> None:
        self.num_batches_tracked.add_(1)
        momentum = 1.0 / float(self.num_batches_tracked) if self.momentum is None else self.momentum
        # (groups, 1, C, 1, ...) -> average over the groups -> (C,)
        batch_mean = mean.reshape(mean.shape[0], -1).mean(0)
        batch_var = var.reshape(var.shape[0], -1).mean(0)
        unbiased = batch_var * count / max(count - 1, 1)
        self.running_mean.lerp_(batch_mean.to(self.running_mean.dtype), momentum)
        self.running_var.lerp_(unbiased.to(self.running_var.dtype), momentum)


def batch_norms(model: nn.Module) -> list[tuple[str, _BatchNorm]]:
    """Every BatchNorm of ``model`` (torch's, SyncBatchNorm and ours), in module order."""
    return [(name, m) for name, m in model.named_modules() if isinstance(m, _BatchNorm)]


def convert_batch_norm(
    model: nn.Module, group_size: int | None, process_group: dist.ProcessGroup | None = None
) -> int:
    """Replace every BatchNorm of ``model`` in place by a `GroupBatchNorm` over ``group_size`` samples.

    The new modules share the old ones' gamma/beta Parameters and running buffers, so optimizer groups
    built before and checkpoints taken before stay valid. Returns the number of modules replaced.
    """
    replaced = 0
    for parent in list(model.modules()):
        for child_name, child in list(parent.named_children()):
            if not isinstance(child, _BatchNorm):
                continue
            new = GroupBatchNorm(
                child.num_features,
                child.eps,
                child.momentum,
                child.affine,
                child.track_running_stats,
                group_size=group_size,
                process_group=process_group,
            )
            if child.affine:
                new.weight, new.bias = child.weight, child.bias
            if child.track_running_stats:
                new.running_mean, new.running_var = child.running_mean, child.running_var
                new.num_batches_tracked = child.num_batches_tracked
            new.train(child.training)
            setattr(parent, child_name, new)
            replaced += 1
    return replaced


def consecutive_rank_groups(world_size: int, ranks_per_group: int) -> list[list[int]]:
    """Ranks ``[0..k-1], [k..2k-1], ...``: neighbours share a node, so BN all-reduces stay on fast links."""
    if world_size % ranks_per_group:
        raise UserError(f"{ranks_per_group} ranks per BN group do not tile {world_size} ranks")
    return [list(range(start, start + ranks_per_group)) for start in range(0, world_size, ranks_per_group)]


def set_bn_momentum(model: nn.Module, momentum: float | None) -> None:
    """Set every BatchNorm's running-statistics momentum (1.0: keep only the last batch's statistics)."""
    for _, bn in batch_norms(model):
        bn.momentum = momentum


@torch.no_grad()
def average_bn_statistics(model: nn.Module, group: dist.ProcessGroup | None = None) -> int:
    """Average every BatchNorm's running mean and variance over the ranks of ``group`` (PFN's all-reduce
    before eval): one all-reduce for all layers, in ``model.modules()`` order. Returns the number of BN layers."""
    layers = [bn for _, bn in batch_norms(model) if bn.track_running_stats and bn.running_mean is not None]
    if not layers or not (dist.is_available() and dist.is_initialized()) or dist.get_world_size(group) == 1:
        return len(layers)
    buffers = [b for bn in layers for b in (bn.running_mean, bn.running_var)]
    flat = torch.cat([b.flatten().float() for b in buffers])
    dist.all_reduce(flat, group=group)
    flat /= dist.get_world_size(group)
    for b, value in zip(buffers, flat.split([b.numel() for b in buffers])):
        b.copy_(value.view_as(b))
    return len(layers)
