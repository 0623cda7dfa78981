"""Count the aten operations a function dispatches, and the CUDA kernels they would launch: the CPU proxies for
GPU kernel launches.

On a GPU an optimizer step costs about one kernel launch per top-level aten op, except a ``torch._foreach_*``
op off its fast path, which launches one kernel per tensor. On the CPU, foreach ops are per-tensor loops
either way, so CPU time says little. `count_ops` is the number of ``aten::`` events that no other ``aten::``
event encloses, as recorded by ``torch.profiler``; nested events (a foreach op's per-tensor fallback,
``empty`` inside ``add``) are not counted. Views (``unbind``, ``split``) count as ops although they launch no
kernel. `count_launches` applies CUDA's rule to the same top-level ops (see there).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import torch
from torch.profiler import ProfilerActivity, profile
from torch.utils._python_dispatch import TorchDispatchMode

# Ops that allocate or describe memory without a kernel.
_NO_KERNEL = {
    "_record_function_enter_new",
    "_record_function_exit",
    "empty",
    "empty_like",
    "empty_strided",
    "new_empty",
    "new_empty_strided",
    "lift_fresh",
    "detach",
}


def _has_aten_ancestor(event) -> bool:
    parent = event.cpu_parent
    while parent is not None:
        if parent.name.startswith("aten::"):
            return True
        parent = parent.cpu_parent
    return False


def top_level_ops(fn: Callable[[], object]) -> Counter:
    """Run ``fn`` once under the profiler; return a Counter of its top-level ``aten::`` op names."""
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
    return Counter(e.name for e in prof.events() if e.name.startswith("aten::") and not _has_aten_ancestor(e))


def count_ops(fn: Callable[[], object]) -> int:
    """Number of top-level aten ops ``fn`` dispatches in one call (see module docstring)."""
    return sum(top_level_ops(fn).values())


def foreach_kernels(args) -> int:
    """Kernels a CUDA ``_foreach_*`` op launches with these arguments: 1 on the multi-tensor fast path, else
    one per tensor.

    The fast path (ATen's ``can_use_fast_route``) needs, at every index, the same sizes, strides and dtype in
    every tensor list; a list of 0-d scalars beside full tensors (e.g. per-tensor trust ratios) fails it. One
    launch is the floor: CUDA's ``multi_tensor_apply`` splits very long lists into a few launches, which this
    count, like the op count, leaves out.
    """
    lists = [a for a in args if isinstance(a, (list, tuple)) and a and isinstance(a[0], torch.Tensor)]
    if not lists:
        return 1
    first = lists[0]
    same = all(
        len(other) == len(first)
        and all(
            x.shape == y.shape and x.stride() == y.stride() and x.dtype == y.dtype
            for x, y in zip(first, other)
        )
        for other in lists[1:]
    )
    return 1 if same else len(first)


class _Launches(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.counts: Counter = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        if name.startswith("_foreach_"):
            self.counts[name] += foreach_kernels(args)
        elif not func.is_view and name not in _NO_KERNEL:
            self.counts[name] += 1
        return func(*args, **(kwargs or {}))


def top_level_launches(fn: Callable[[], object]) -> Counter:
    """Run ``fn`` once; return the CUDA kernels its top-level aten ops would launch, per op name.

    The dispatch mode sees only top-level ops (it is off while an op runs, so a foreach op's per-tensor CPU
    loop is not seen again); views and allocations launch nothing; a foreach op launches `foreach_kernels`.
    """
    with _Launches() as mode:
        fn()
    return mode.counts


def count_launches(fn: Callable[[], object]) -> int:
    """CUDA kernel launches ``fn`` would make, by `top_level_launches`'s rule."""
    return sum(top_level_launches(fn).values())


__all__ = ["count_launches", "count_ops", "foreach_kernels", "top_level_launches", "top_level_ops"]
