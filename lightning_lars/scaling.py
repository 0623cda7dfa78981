"""Global batch -> per-device batch, accumulation and learning rate.

A recipe fixes the *global* batch (images per optimizer step, summed over every device) because that is
what its paper fixed. Whatever hardware the user has, `plan_batch` keeps it exact; `scale_lr` is the one
place where a learning rate given at a reference batch becomes the LR actually used.
"""

from __future__ import annotations

from dataclasses import dataclass

from lightning_lars.errors import UserError


def scale_lr(base_lr: float, base_batch: int, global_batch: int) -> float:
    """Linear scaling rule (Goyal et al. 2017, sec. 2.1): LR grows in proportion to the global batch.

    ``base_lr`` is the LR at ``base_batch`` images per step (256 for "LR per 256 images"; a recipe that
    quotes its paper's absolute LR sets ``base_batch`` to the paper's global batch, so the LR is used as
    published and changes only if the user changes the global batch).
    """
    if base_batch <= 0 or global_batch <= 0:
        raise UserError(f"batch sizes must be positive (base_batch={base_batch}, global_batch={global_batch})")
    return base_lr * global_batch / base_batch


@dataclass(frozen=True)
class BatchPlan:
    global_size: int  # images per optimizer step, all devices
    world_size: int  # devices x nodes
    per_device: int  # images per forward pass on one device
    accumulation: int  # forward/backward passes per optimizer step

    def describe(self) -> str:
        return (
            f"global batch {self.global_size} = {self.world_size} devices x {self.per_device} images"
            f" x {self.accumulation} accumulation steps"
        )


def plan_batch(global_size: int, devices: int, nodes: int = 1, max_per_device: int | None = None) -> BatchPlan:
    """Split ``global_size`` over ``devices * nodes`` ranks, accumulating when a rank's share is too big.

    The smallest accumulation count whose per-device batch fits ``max_per_device`` and divides exactly
    wins: the global batch is kept bit-exact or the run is refused.
    """
    world = devices * nodes
    if global_size % world:
        raise UserError(
            f"global batch {global_size} does not divide across {world} devices ({devices} x {nodes} nodes);"
            f" use a device count that divides it, or set batch.global_size to a multiple of {world}"
        )
    per_rank = global_size // world
    cap = max_per_device or per_rank
    for accumulation in range(1, per_rank + 1):
        if per_rank % accumulation == 0 and per_rank // accumulation <= cap:
            return BatchPlan(global_size, world, per_rank // accumulation, accumulation)
    raise AssertionError("unreachable: accumulation == per_rank always fits")
