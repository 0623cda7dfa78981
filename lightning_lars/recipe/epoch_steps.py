"""Steps from the recipe keys ``epoch_length`` (how the source counted an epoch) and ``evaluation`` (when it
evaluated); `lightning_lars.recipe.keys` checks them against the planned run first."""

from __future__ import annotations

import math


def count_steps_per_epoch(
    num_images: int, global_batch: int, mode: str, workers: int | None = None, steps: int | None = None
) -> int:
    """Optimizer steps in one epoch as the source counted them.

    - ``drop_last``: ``N // B``, every step a full batch (PyTorch ``drop_last=True``, our loaders).
    - ``padded``: ``ceil(floor(N / W) / (B / W))``: each of the source's ``W`` data-parallel workers reads
      its shard and pads its last batch. The shard is ``int(N / W)`` as the MXNet code writes it
      (``get_epoch_size`` in NVIDIA's and Fujitsu's MLPerf ``common/fit.py``); ``W = 1`` is the global
      ``ceil(N / B)`` of later NVIDIA code.
    - ``fixed``: the source's own count, ``steps``.
    """
    if mode == "drop_last":
        return num_images // global_batch
    if mode == "padded":
        per_worker_batch = global_batch // workers
        return math.ceil((num_images // workers) / per_worker_batch)
    return int(steps)


def counting_text(
    num_images: int, global_batch: int, mode: str, workers: int | None, steps: int | None
) -> str:
    """How ``count_steps_per_epoch`` counted, for the plan's line."""
    if mode == "padded":
        return (
            f"padded: ceil(int({num_images} / {workers} workers) / {global_batch // workers} per worker),"
            " each worker pads its last batch"
        )
    if mode == "fixed":
        return f"fixed: the source's {steps} steps per epoch"
    return f"drop_last: {num_images} // {global_batch}"


def evaluation_steps(
    epoch_ends: list[int],
    total_steps: int,
    every_epochs: int | None,
    offset_epochs: int,
    every_steps: int | None,
    offset_steps: int,
) -> list[int]:
    """Completed-update counts after which to evaluate, the final step always among them.

    ``every_n_epochs: k, offset_epochs: o``: after (1-based) epochs o+1, o+1+k, o+1+2k, ... (MLPerf's
    ``eval_offset``: epoch e, 0-based, is evaluated when e >= o and (e - o) % k == 0).
    ``every_n_steps: k, offset_steps: o``: after steps o+k, o+2k, ...
    """
    if every_epochs is not None:
        steps = [epoch_ends[e - 1] for e in range(offset_epochs + 1, len(epoch_ends) + 1, every_epochs)]
    else:
        steps = list(range(offset_steps + every_steps, total_steps + 1, every_steps))
    return sorted({s for s in steps if s <= total_steps} | {total_steps})
