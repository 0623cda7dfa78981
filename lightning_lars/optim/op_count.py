"""Count the aten operations a function dispatches: the CPU proxy for GPU kernel launches.

On a GPU an optimizer step costs about one kernel launch per top-level aten op (a foreach op on CUDA is one
multi-tensor kernel); on the CPU, foreach ops fall back to per-tensor loops, so CPU time says little. The
count here is the number of ``aten::`` events that no other ``aten::`` event encloses, as recorded by
``torch.profiler``; nested events (a foreach op's per-tensor fallback, ``empty`` inside ``add``) are not
counted. Views (``unbind``, ``split``) count as ops although they launch no kernel.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from torch.profiler import ProfilerActivity, profile


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


__all__ = ["count_ops", "top_level_ops"]
