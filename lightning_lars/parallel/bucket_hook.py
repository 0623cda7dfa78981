"""Grouped all-reduce DDP communication hook: small first group, growing groups after.

Fujitsu's 70.4 s ResNet-50 run (MLPerf v0.6 open division, mlcommons/training_results_v0.6) overlapped
gradient communication with backward by all-reducing gradients in groups whose first one is small (it is ready
early, so communication starts early) and whose later ones are larger (fewer latency-bound calls while
backward still runs). This module reproduces that on top of DDP's buckets:

* DDP cuts the gradients into buckets (``bucket_cap_mb``; torch >= 2.13 also takes per-bucket limits,
  ``bucket_cap_mb_list``) and calls the hook once per bucket, in bucket order, as each becomes ready.
* :func:`grouped_allreduce_hook` holds buckets back until the current group reaches its byte cap
  (``group_caps_mb[k]``; the last cap repeats), then launches one all-reduce over the whole group and
  completes the group's futures from it. Groups depend only on bucket sizes and order, never on timing,
  so every rank forms the same groups.
* Optional compression: the group is cast to bf16 or fp16 for the wire and back to the bucket dtype.
* Optional per-parameter gradient norms, computed from the averaged gradients as each group lands, so
  LARS/LAMB can skip their own pass over the gradients (see :class:`GroupedAllReduceState.grad_norms`).

DDP contract (torch ``register_comm_hook``): one Future per bucket holding the bucket's new flat tensor,
averaged over ranks (the hook divides by world size itself), and every Future complete by the end of
backward, or DDP waits forever. The last group is flushed by counting elements, not by
``bucket.is_last()``, which is unreliable in the first iteration with ``static_graph=True``.

No ``from __future__ import annotations`` here: DDP checks the hook's annotations by identity.
"""

from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from lightning_lars.core.errors import UserError

MIB = 1024 * 1024  # bytes

# Wire dtypes for gradient compression, by config name.
COMPRESSION_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}

# Stated error bound of compressed averaging, per element: |hooked - exact| <= rtol * max|exact| + atol.
# rtol: 8 unit roundoffs (2**-9 bf16, 2**-12 fp16): one cast per rank and world_size - 1 roundings in the
# sum, with headroom for cancellation between ranks; measured up to 0.4 of this on 2 gloo ranks.
# atol: fp16 flushes |g| / world_size below its normal range (6.1e-5) to a 2**-24 grid; bf16 has fp32's range.
COMPRESSION_TOLERANCE = {"bf16": (2**-6, 0.0), "fp16": (2**-9, 2**-22)}


def compression_error_bound(compression: str, exact: torch.Tensor) -> float:
    """Largest elementwise error the stated tolerance allows for gradients ``exact`` (same units)."""
    rtol, atol = COMPRESSION_TOLERANCE[compression]
    return rtol * exact.abs().max().item() + atol


@dataclass
class _PendingBucket:
    """A bucket waiting for its group's all-reduce: its flat buffer, per-parameter views, and the Future."""

    buffer: torch.Tensor
    grads: list[torch.Tensor]
    params: list[torch.Tensor]
    future: torch.futures.Future


@dataclass
class GroupedAllReduceState:
    """Settings and per-backward bookkeeping of :func:`grouped_allreduce_hook`.

    Args:
        group_caps_mb: byte cap of each group in MiB, in bucket order (DDP's first bucket holds the
            gradients that are ready first, i.e. the last layers). The last cap repeats. A group closes as
            soon as it reaches its cap, so a bucket larger than the cap forms a group by itself.
            ``None``: no grouping, every DDP bucket is reduced on its own (e.g. with ``bucket_cap_mb_list``).
            ``python -m lightning_lars.parallel.planner`` proposes these.
        compression: ``None`` (communicate in the gradient dtype), ``"bf16"`` or ``"fp16"``.
        compute_grad_norms: fill :attr:`grad_norms` with each parameter's averaged-gradient L2 norm.
        process_group: ``None`` for the default (world) group, resolved at the first call, since Hydra
            builds this state before the process group exists.

    Attributes:
        grad_norms: parameter -> 0-dim fp32 tensor, the L2 norm of the gradient DDP writes into
            ``param.grad`` in this backward. Consumers take entries with :meth:`pop_grad_norm`, so a norm
            is never reused in a later step.
        num_allreduces: all-reduce calls launched so far (each group is one).
        last_backward_groups: buckets per group in the latest complete backward, e.g. ``[1, 2, 4]``.
    """

    group_caps_mb: list[float] | None = field(default_factory=lambda: [1.0, 4.0, 16.0, 25.0])
    compression: str | None = None
    compute_grad_norms: bool = False
    process_group: dist.ProcessGroup | None = None
    grad_norms: dict = field(default_factory=dict, repr=False)
    num_allreduces: int = 0
    last_backward_groups: list = field(default_factory=list)
    _groups: list = field(default_factory=list, repr=False)
    _pending: list = field(default_factory=list, repr=False)
    _pending_bytes: int = 0
    _group_index: int = 0
    _seen_numel: int = 0
    _total_numel: int | None = None

    def __post_init__(self):
        if self.group_caps_mb is not None:  # None: one group per DDP bucket
            self.group_caps_mb = [float(cap) for cap in self.group_caps_mb]  # OmegaConf ListConfig -> list
            if not self.group_caps_mb or min(self.group_caps_mb) <= 0:
                raise UserError(
                    f"group_caps_mb must be null or a non-empty list of positive MiB, got {self.group_caps_mb}"
                )
        if self.compression not in (None, *COMPRESSION_DTYPES):
            raise UserError(
                f"compression={self.compression!r} is not one of null, bf16, fp16:"
                " set strategy.ddp_comm_state.compression"
            )

    def bind(self, ddp_model: torch.nn.parallel.DistributedDataParallel) -> None:
        """Record how many gradient elements one backward produces, to flush the last group by count."""
        ignored = set(getattr(ddp_model, "parameters_to_ignore", ()))
        self._total_numel = sum(
            param.numel()
            for name, param in ddp_model.module.named_parameters()
            if param.requires_grad and name not in ignored
        )

    def pop_grad_norm(self, param: torch.Tensor) -> torch.Tensor | None:
        """The hook's norm of ``param.grad`` from the latest backward, removed so it is used once."""
        return self.grad_norms.pop(param, None)

    def allreduce_sum(self, flat: torch.Tensor) -> torch.futures.Future:
        """Start summing ``flat`` over the ranks; the Future's value is ``[summed tensor]``.

        One NCCL/gloo all-reduce here; :mod:`lightning_lars.parallel.topology_hooks` overrides this with
        the 2D-torus and hierarchical algorithms, which keep the grouping above unchanged.
        """
        process_group = self.process_group or dist.group.WORLD
        return dist.all_reduce(flat, group=process_group, async_op=True).get_future()

    def group_cap_bytes(self) -> int:
        """Byte cap of the group being filled now (0 without grouping: every bucket closes its group)."""
        caps = self.group_caps_mb
        if caps is None:
            return 0
        return int(caps[min(self._group_index, len(caps) - 1)] * MIB)


def plan_groups(bucket_bytes: list[int], group_caps_mb: list[float]) -> list[list[int]]:
    """The groups the hook forms from buckets of these sizes (bytes, in bucket order): lists of indices.

    A group closes as soon as its bytes reach its cap (MiB; the last cap repeats); the final buckets form
    the last group whatever their size. The planner simulates exactly these groups.
    """
    groups, current, current_bytes = [], [], 0
    for index, size in enumerate(bucket_bytes):
        current.append(index)
        current_bytes += size
        cap = group_caps_mb[min(len(groups), len(group_caps_mb) - 1)] * MIB
        if current_bytes >= int(cap):
            groups.append(current)
            current, current_bytes = [], 0
    if current:
        groups.append(current)
    return groups


def grouped_allreduce_hook(
    state: GroupedAllReduceState, bucket: dist.GradBucket
) -> torch.futures.Future[torch.Tensor]:
    """Coalesce DDP buckets into growing groups and all-reduce (average) each group once.

    Args:
        state: settings and the buckets held back so far in this backward.
        bucket: DDP's flat gradient bucket; ``bucket.buffer()`` is the flat tensor, ``bucket.gradients()``
            per-parameter views into it, ``bucket.parameters()`` the matching parameters.

    Returns:
        A Future that completes with the averaged flat buffer once this bucket's group is reduced.
    """
    if state._total_numel is None:
        raise RuntimeError("GroupedAllReduceState.bind(ddp_model) must run before the first backward")
    buffer = bucket.buffer()
    devices = [buffer.device] if buffer.device.type == "cuda" else []  # CUDA-aware Future: stream sync
    future = torch.futures.Future(devices=devices)
    grads = list(bucket.gradients()) if state.compute_grad_norms else []
    params = list(bucket.parameters()) if state.compute_grad_norms else []
    state._pending.append(_PendingBucket(buffer, grads, params, future))
    state._pending_bytes += buffer.numel() * buffer.element_size()
    state._seen_numel += buffer.numel()
    last_in_backward = state._seen_numel >= state._total_numel
    if state._pending_bytes >= state.group_cap_bytes() or last_in_backward:
        _flush_group(state)
    if last_in_backward:  # next backward starts over with the small first group
        state.last_backward_groups, state._groups = state._groups, []
        state._group_index = 0
        state._seen_numel = 0
    return future


def _flush_group(state: GroupedAllReduceState) -> None:
    """Launch one all-reduce over the held-back buckets; complete their Futures when it lands."""
    group, state._pending, state._pending_bytes = state._pending, [], 0
    state._group_index += 1
    state._groups.append(len(group))
    state.num_allreduces += 1
    process_group = state.process_group or dist.group.WORLD
    world_size = dist.get_world_size(process_group)
    buffers = [pending.buffer for pending in group]
    flat = buffers[0] if len(buffers) == 1 else torch.cat(buffers)
    if state.compression is not None:
        flat = flat.to(COMPRESSION_DTYPES[state.compression])
    elif len(buffers) == 1:
        flat = flat.clone()  # the buffer is DDP's; only write it back when the average is ready
    # Average before the sum, as DDP's default hook does: keeps fp16 sums of many ranks in range.
    flat.div_(world_size)
    summed = state.allreduce_sum(flat)

    def complete(reduced: torch.futures.Future) -> None:
        try:
            averaged = reduced.value()[0]
            offset = 0
            for pending in group:
                numel = pending.buffer.numel()
                pending.buffer.copy_(averaged[offset : offset + numel].view_as(pending.buffer))
                offset += numel
                if state.compute_grad_norms and pending.grads:
                    norms = torch._foreach_norm([grad.float() for grad in pending.grads])
                    state.grad_norms.update(zip(pending.params, norms))
                pending.future.set_result(pending.buffer)
        except Exception as error:  # a Future left pending deadlocks DDP: fail every one instead
            for pending in group:
                if not pending.future.done():
                    pending.future.set_exception(error)
            raise

    summed.then(complete)


def register(
    ddp_model: torch.nn.parallel.DistributedDataParallel,
    state: GroupedAllReduceState,
    hook=grouped_allreduce_hook,
) -> None:
    """Bind ``state`` to the model and register the hook on any device (CPU/gloo included)."""
    if getattr(state, "bind", None) is not None:
        state.bind(ddp_model)
    ddp_model.register_comm_hook(state, hook)
