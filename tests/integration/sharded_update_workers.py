"""Worker processes of test_sharded_update.py (no Lightning import: short start-up for 4 processes)."""

import functools
import os

import torch
import torch.distributed as dist
from helpers import small_conv_net
from torch.nn.parallel import DistributedDataParallel

from lightning_lars.optim.lamb import LAMB
from lightning_lars.optim.lars import LARS
from lightning_lars.optim.param_groups import param_groups
from lightning_lars.parallel.sharded_update import ShardedUpdate

OPTIMIZERS = {
    "lars_mlperf": functools.partial(LARS, momentum=0.9, form="mlperf"),
    "lars_nvidia_nesterov_clip": functools.partial(
        LARS, momentum=0.9, form="nvidia", nesterov=True, clip=True
    ),
    "lamb_clipped": functools.partial(LAMB, max_grad_norm=0.05),  # small: the global clip is active
}
WEIGHT_DECAY = 1e-3


def build(name: str, sharded: bool):
    model = DistributedDataParallel(small_conv_net(widths=(8, 16), last_conv=None))
    optimizer = OPTIMIZERS[name](param_groups(model.module, WEIGHT_DECAY), lr=0.5)
    return model, ShardedUpdate(optimizer) if sharded else optimizer


def state_equal(a: dict, b: dict) -> bool:
    if a["state"].keys() != b["state"].keys():
        return False
    for index, entry in a["state"].items():
        if entry.keys() != b["state"][index].keys():
            return False
        if not all(
            torch.equal(torch.as_tensor(v), torch.as_tensor(b["state"][index][k])) for k, v in entry.items()
        ):
            return False
    strip = lambda groups: [{k: v for k, v in g.items()} for g in groups]
    return strip(a["param_groups"]) == strip(b["param_groups"])


def compare(rank: int, world_size: int, port: int) -> None:
    """6 steps with a changing LR, unsharded vs sharded, bitwise; a checkpoint round trip after step 3."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    torch.set_num_threads(1)
    for name, make in OPTIMIZERS.items():
        where = f"{name} world {world_size} rank {rank}"
        (plain, reference), (model, sharded) = build(name, False), build(name, True)
        generator = torch.Generator().manual_seed(rank)
        for step in range(6):
            images = torch.randn(4, 3, 10, 10, generator=generator)
            labels = torch.randint(0, 10, (4,), generator=generator)
            for net, optimizer in ((plain, reference), (model, sharded)):
                optimizer.zero_grad()
                torch.nn.functional.cross_entropy(net(images), labels).backward()
                for group in optimizer.param_groups:
                    group["lr"] = 0.5 / (1 + step)  # as the schedule callback does
                optimizer.step()
            for (pname, a), b in zip(plain.module.named_parameters(), model.module.parameters()):
                assert torch.equal(a, b), f"{where} step {step} {pname}"
            if step == 2:  # checkpoint: the full state, then a fresh sharded optimizer resumes from it
                sharded.consolidate_state_dict()
                full = sharded.state_dict()
                assert state_equal(full, reference.state_dict()), f"{where}: consolidated state"
                mine, total = sharded.owned_state_bytes(), torch.tensor([sharded.owned_state_bytes()])
                dist.all_reduce(total)
                everything = sum(
                    t.numel() * t.element_size()
                    for s in reference.state.values()
                    for t in s.values()
                    if isinstance(t, torch.Tensor)
                )
                assert total.item() == everything and mine < everything, f"{where}: state is not sharded"
                sharded = ShardedUpdate(make(param_groups(model.module, WEIGHT_DECAY), lr=0.5))
                sharded.load_state_dict(full)
                assert sharded.owned_state_bytes() == mine, f"{where}: load kept other ranks' state"
    dist.destroy_process_group()
