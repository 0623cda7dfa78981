"""Our batch norm under torch.compile: ghost BN, synced BN groups, channels_last and bf16 autocast each compile
to whole graphs (no graph break, one graph per train/eval mode, no recompilation on the next steps) and
compute what eager computes. Oracles: dynamo's own counters (``torch._dynamo.utils.counters``) and the same
module run eagerly. Slow tier: each case compiles twice (training, eval); the 5 cases took 819 s on 2 cores at
load average ~20 (2026-11-26).

The synced case is our fix: ``torch.distributed.nn.functional.all_reduce`` raises under torch.compile (it says
so: "not supported under torch.compile") and broke the graph at every synced layer; ``AllReduceSum`` uses torch's
functional collectives, which dynamo traces. torch's own ``nn.SyncBatchNorm`` still breaks the graph
(pytorch/pytorch#161302, open) and refuses CPU tensors, so it is not tested here; no recipe uses it."""

from __future__ import annotations

import os

import pytest
import torch
import torch.distributed as dist
from helpers import free_port, small_conv_net
from torch._dynamo.utils import counters

from lightning_lars.models.batch_norm import GroupBatchNorm, convert_batch_norm

pytestmark = pytest.mark.slow
BATCH, GHOST = 8, 4


@pytest.fixture
def one_rank_group():
    """A real gloo process group of this one process: the synced path's collectives run, over one rank."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    dist.init_process_group("gloo", rank=0, world_size=1)
    yield dist.new_group([0])
    dist.destroy_process_group()


def steps(model: torch.nn.Module, channels_last: bool, bf16: bool) -> list[torch.Tensor]:
    """Two training forwards/backwards, an eval forward, one more training step: outputs and gradients."""
    generator = torch.Generator().manual_seed(0)
    images = [torch.randn(BATCH, 3, 12, 12, generator=generator) for _ in range(3)]
    if channels_last:
        images = [x.contiguous(memory_format=torch.channels_last) for x in images]
    seen = []
    for mode, x in zip(("train", "train", "eval", "train"), images + images[:1]):
        model.train(mode == "train")
        with (
            torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16),
            torch.set_grad_enabled(mode == "train"),
        ):
            out = model(x)
        seen.append(out.float().detach())
        if mode == "train":
            out.float().square().mean().backward()
            seen += [p.grad.clone() for p in model.parameters()]
            model.zero_grad(set_to_none=True)
    return seen


@pytest.mark.parametrize(
    ("name", "group_size", "synced", "channels_last", "bf16"),
    [
        ("ghost", GHOST, False, False, False),
        ("plain", None, False, False, False),
        ("synced", None, True, False, False),
        ("ghost channels_last", GHOST, False, True, False),
        ("ghost bf16 autocast", GHOST, False, False, True),
    ],
)
def test_group_batch_norm_compiles_whole_and_matches_eager(
    request, name, group_size, synced, channels_last, bf16
):
    group = request.getfixturevalue("one_rank_group") if synced else None

    def net() -> torch.nn.Module:  # seeded: both calls give the same weights
        model = small_conv_net(widths=(8, 8), last_conv=None)
        assert convert_batch_norm(model, group_size, group) == 2
        return model.to(memory_format=torch.channels_last) if channels_last else model

    eager, compiled = net(), net()
    compiled.compile()
    torch._dynamo.reset()
    counters.clear()

    expected = steps(eager, channels_last, bf16)
    got = steps(compiled, channels_last, bf16)

    assert dict(counters["graph_break"]) == {}, f"{name}: graph breaks {dict(counters['graph_break'])}"
    # one graph for training, one for eval: the third training step reused the first graph
    assert counters["stats"]["unique_graphs"] == 2, f"{name}: {dict(counters['stats'])}"
    tolerance = {"rtol": 2e-2, "atol": 2e-2} if bf16 else {"rtol": 1e-4, "atol": 1e-5}
    for want, have in zip(expected, got, strict=True):
        torch.testing.assert_close(have, want, **tolerance)
    for mine, theirs in zip(compiled.modules(), eager.modules()):
        if isinstance(mine, GroupBatchNorm):  # running statistics moved as eagerly
            torch.testing.assert_close(mine.running_mean, theirs.running_mean, **tolerance)
            torch.testing.assert_close(mine.running_var, theirs.running_var, **tolerance)
            assert int(mine.num_batches_tracked) == int(theirs.num_batches_tracked) == 3
