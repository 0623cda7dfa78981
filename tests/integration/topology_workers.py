"""Worker processes of test_topology_hooks.py, in a module that does not import Lightning: each of the 4
spawned processes imports only torch and the hooks, which keeps the 4-process test's start-up short."""

import os

import torch
import torch.distributed as dist
from helpers import small_conv_net
from torch.nn.parallel import DistributedDataParallel

from lightning_lars.parallel.bucket_hook import register
from lightning_lars.parallel.topology_hooks import (
    HierarchicalAllReduceState,
    Torus2DAllReduceState,
    hierarchical_allreduce_hook,
    torus_2d_allreduce_hook,
)

NODES, DEVICES = 2, 2
UNIT_ROUNDOFF = 2.0**-24  # fp32
HOOKS = {
    "torus2d": (Torus2DAllReduceState, torus_2d_allreduce_hook),
    "hierarchical": (HierarchicalAllReduceState, hierarchical_allreduce_hook),
}


# conv + BN + linear with 1-18 KiB gradient tensors (odd width 13: the torus pads its slices)
NET = {"widths": (8, 16, 13), "last_conv": None}


def batch(generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(4, 3, 12, 12, generator=generator), torch.randint(0, 10, (4,), generator=generator)


def backward(model, images, labels) -> None:
    model.zero_grad()
    torch.nn.functional.cross_entropy(model(images), labels).backward()


def hooked_ddp(name: str, caps, grid) -> tuple[DistributedDataParallel, object]:
    state_cls, hook = HOOKS[name]
    # ~1 KiB buckets: several per backward
    model = DistributedDataParallel(small_conv_net(**NET), bucket_cap_mb=0.001)
    state = state_cls(group_caps_mb=caps, grid=grid)
    register(model, state, hook)
    return model, state


def compare(rank: int, port: int) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), LOCAL_WORLD_SIZE=str(DEVICES))
    dist.init_process_group("gloo", rank=rank, world_size=NODES * DEVICES)
    torch.set_num_threads(1)
    world = NODES * DEVICES
    # grid configured, or from LOCAL_WORLD_SIZE (as torchrun sets it); groups of 1 KiB buckets, or none
    for name, caps, grid in (("torus2d", [0.001, 0.016], [NODES, DEVICES]), ("hierarchical", None, None)):
        where = f"{name} caps={caps} grid={grid} rank {rank}"
        plain = DistributedDataParallel(small_conv_net(**NET), bucket_cap_mb=0.001)
        hooked, state = hooked_ddp(name, caps, grid)
        assert state.grid == [NODES, DEVICES], where
        local = small_conv_net(**NET)  # this rank's own gradient, for the float64 oracle
        optimizers = [torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9) for m in (plain, hooked, local)]
        generator = torch.Generator().manual_seed(rank)  # different data on each rank
        for step in range(3):
            images, labels = batch(generator)
            for model in (plain, hooked, local):
                backward(model, images, labels)
            for (pname, ref), param, own in zip(
                plain.named_parameters(), hooked.parameters(), local.parameters()
            ):
                gathered = [torch.empty_like(own.grad, dtype=torch.float64) for _ in range(world)]
                dist.all_gather(gathered, own.grad.double())
                exact = torch.stack(gathered).mean(0)
                # fp32 sum of p terms g_i / p (exact division: p is a power of 2) in any order:
                # |error| <= (p - 1) u sum_i |g_i / p| (Higham, Accuracy and Stability, eq. 4.4)
                bound = (world - 1) * UNIT_ROUNDOFF * torch.stack(gathered).abs().mean(0) * (1 + 1e-6)
                assert ((ref.grad.double() - exact).abs() <= bound).all(), f"{where} step {step} {pname}: DDP"
                assert ((param.grad.double() - exact).abs() <= bound).all(), (
                    f"{where} step {step} {pname}: hook"
                )
                own.grad.copy_(ref.grad)  # all three step with DDP's gradient: same weights next step
                param.grad.copy_(ref.grad)
            if caps is not None and step > 0:
                assert len(state.last_backward_groups) < sum(state.last_backward_groups), (
                    f"{where}: no grouping"
                )
            for optimizer in optimizers:
                optimizer.step()
        assert state.num_allreduces >= 3, where
        # Training without any gradient copying: 5 steps, same data, hooked vs plain DDP.
        plain = DistributedDataParallel(small_conv_net(**NET), bucket_cap_mb=0.001)
        hooked, _ = hooked_ddp(name, caps, grid)
        optimizers = [torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9) for m in (plain, hooked)]
        generator = torch.Generator().manual_seed(100 + rank)
        for _ in range(5):
            images, labels = batch(generator)
            for model, optimizer in zip((plain, hooked), optimizers):
                backward(model, images, labels)
                optimizer.step()
        start = small_conv_net(**NET).state_dict()
        for (pname, ref), param in zip(
            plain.module.state_dict().items(), hooked.module.state_dict().values()
        ):
            # 5 steps of per-element gradient differences of a few fp32 ulps, times lr 0.1 with momentum
            torch.testing.assert_close(param, ref, rtol=1e-5, atol=1e-6, msg=f"{where}: {pname}")
        assert (plain.module.state_dict()["0.weight"] - start["0.weight"]).abs().max() > 1e-3  # it trained
    dist.destroy_process_group()
