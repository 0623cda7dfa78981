"""Global batch -> per-device batch, accumulation and learning rate.

A recipe fixes the *global* batch (images per optimizer step, summed over every device) because that is
what its paper fixed. Whatever hardware the user has, `plan_batch` keeps it exact; `scale_lr` is the one
place where a learning rate given at a reference batch becomes the LR actually used.
"""

from __future__ import annotations

from dataclasses import dataclass

from lightning_lars.core.errors import UserError


def scale_lr(base_lr: float, base_batch: int, global_batch: int) -> float:
    """Linear scaling rule (Goyal et al. 2017, sec. 2.1): LR grows in proportion to the global batch.

    ``base_lr`` is the LR at ``base_batch`` images per step (256 for "LR per 256 images"; a recipe that
    quotes its paper's absolute LR sets ``base_batch`` to the paper's global batch, so the LR is used as
    published and changes only if the user changes the global batch).
    """
    if base_batch <= 0 or global_batch <= 0:
        raise UserError(
            f"batch sizes must be positive (base_batch={base_batch}, global_batch={global_batch})"
        )
    return base_lr * global_batch / base_batch


@dataclass(frozen=True)
class BatchPlan:
    global_size: int  # images per optimizer step, all devices
    world_size: int  # devices x nodes
    per_device: int  # images per forward pass on one device
    accumulation: int  # forward/backward passes per optimizer step
    bn_group: int | None = None  # samples per BN statistic; None = the per-device batch (plain BN)
    bn_ranks: int = 1  # ranks whose micro-batches share one BN statistic (> 1: synchronised BN)

    @property
    def bn_mode(self) -> str:
        """``local`` (plain BN over the device batch), ``ghost`` (several statistics per device batch) or
        ``sync`` (one statistic over ``bn_ranks`` devices)."""
        if self.bn_group is None or self.bn_group == self.per_device:
            return "local"
        return "ghost" if self.bn_group < self.per_device else "sync"

    def describe(self) -> str:
        span = self.bn_group or self.per_device
        bn = {
            "local": f"BN over each device's {span} images",
            "ghost": f"ghost BN over {span} images ({self.per_device // span} statistics per device batch)",
            "sync": f"BN synchronised over {span} images ({self.bn_ranks} devices x {self.per_device})",
        }[self.bn_mode]
        return (
            f"global batch {self.global_size} = {counted(self.world_size, 'device')} x"
            f" {counted(self.per_device, 'image')} x {counted(self.accumulation, 'accumulation step')}; {bn}"
        )


def counted(number: float, noun: str, spec: str = "") -> str:
    """``1 device``, ``8 devices``; ``spec`` formats the number (``.4g``: ``0.5128 epochs``)."""
    return f"{number:{spec}} {noun}{'' if number == 1 else 's'}"


def _bn_ranks(per_device: int, bn_group: int | None, world: int) -> int | None:
    """Ranks per BN statistic if ``bn_group`` can be formed from ``per_device``-image micro-batches, else None."""
    if bn_group is None or per_device % bn_group == 0:
        return 1  # plain or ghost BN: whole statistics inside one device batch
    if bn_group % per_device == 0 and world % (bn_group // per_device) == 0:
        return bn_group // per_device  # synchronised BN over consecutive ranks, groups tile the world
    return None


# Fewer samples per BN statistic cannot train: over one sample the variance is 0 and, where the feature map is
# 1x1 (ResNet's last stage at 32 px), torch's BatchNorm raises "Expected more than 1 value per channel".
MIN_BN_SPAN = 2


def _first_plan(global_size: int, world: int, cap: int | None, bn_group: int | None) -> BatchPlan | None:
    """The plan with the fewest accumulation steps that keeps ``global_size`` and the BN span exact, or None."""
    per_rank = global_size // world
    for accumulation in range(1, per_rank + 1):
        per_device = per_rank // accumulation
        if per_rank % accumulation or per_device > (cap or per_rank):
            continue
        ranks = _bn_ranks(per_device, bn_group, world)
        if ranks is not None and (bn_group or per_device) >= MIN_BN_SPAN:
            return BatchPlan(global_size, world, per_device, accumulation, bn_group, ranks)
    return None


def nearest_global_sizes(global_size: int, world: int, cap: int | None, bn_group: int | None) -> list[int]:
    """The nearest global batch below ``global_size`` and the nearest above that plan on these devices."""
    found = []
    for step in (-world, world):  # multiples of the device count, the nearest first
        size = ((global_size - 1) // world if step < 0 else global_size // world + 1) * world
        while 0 < size <= 2 * global_size + world:
            if _first_plan(size, world, cap, bn_group) is not None:
                found.append(size)
                break
            size += step
    return found


def largest_global_size(limit: int, world: int, cap: int | None, bn_group: int | None) -> int | None:
    """The largest global batch of at most ``limit`` images that plans on ``world`` devices (a multiple of the
    device count whose BN span ``bn_group`` can be formed), or None."""
    for size in range(limit - limit % world, 0, -world):
        if (bn_group is None or bn_group <= size) and _first_plan(size, world, cap, bn_group) is not None:
            return size
    return None


def plan_batch(
    global_size: int,
    devices: int,
    nodes: int = 1,
    max_per_device: int | None = None,
    bn_group: int | None = None,
) -> BatchPlan:
    """Split ``global_size`` over ``devices * nodes`` ranks, accumulating when a rank's share is too big.

    The smallest accumulation count wins whose per-device batch fits ``max_per_device``, divides the rank's
    share exactly, and can form BN statistics of exactly ``bn_group`` samples (at least `MIN_BN_SPAN`): a
    multiple of it (ghost BN, or plain BN when equal), or a divisor of it spread over ``bn_group / per_device``
    ranks that tile the world (SyncBatchNorm groups). The global batch and the BN span are kept exact or the
    run is refused, naming the nearest global batches that plan.
    """
    world = devices * nodes
    if global_size <= 0 or world <= 0:
        raise UserError(f"global batch ({global_size}) and device count ({world}) must be positive")
    if global_size % world:
        raise UserError(
            f"global batch {global_size} does not divide across {world} devices ({devices} x {nodes} nodes);"
            f" use a device count that divides it, or set batch.global_size to a multiple of {world}"
        )
    if bn_group is not None and not MIN_BN_SPAN <= bn_group <= global_size:
        raise UserError(
            f"batch.bn_group={bn_group} must lie in [{MIN_BN_SPAN}, global batch {global_size}];"
            " or null for BN over each device's batch"
        )
    plan = _first_plan(global_size, world, max_per_device, bn_group)
    if plan is not None:
        return plan
    cap = max_per_device or global_size // world
    if bn_group is not None and cap < bn_group and _first_plan(global_size, world, bn_group, bn_group):
        fix = f"raise batch.max_per_device to {bn_group}, use more devices, or set batch.bn_group"
    else:
        sizes = nearest_global_sizes(global_size, world, max_per_device, bn_group)
        fix = f"set batch.global_size to {' or '.join(map(str, sizes))}" if sizes else "set batch.bn_group"
    if bn_group is None:
        why = f"splits only into device batches of fewer than {MIN_BN_SPAN} images (BN over 1 image cannot train)"
    else:
        why = (
            f"cannot form BN statistics over batch.bn_group={bn_group} samples: a device batch must be a"
            f" multiple of {bn_group}, or divide it with {bn_group}/per-device ranks per group"
        )
    raise UserError(
        f"global batch {global_size} on {world} device(s) with at most {cap} images each {why}; {fix}"
    )
