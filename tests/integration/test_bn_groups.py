"""BN statistics over several ranks (Google's span of 128 over 4 chips, at toy scale) on gloo, 4 processes.

Ranks {0, 1} and {2, 3} each share one statistic: every rank's output and input gradient must equal plain BN
over its group's concatenated batch, computed in one process from the same seeded data.
"""

import os

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F

from lightning_lars.models.batch_norm import GroupBatchNorm, consecutive_rank_groups

pytestmark = pytest.mark.slow
WORLD, RANKS_PER_GROUP, PER_RANK, CHANNELS = 4, 2, 3, 5


def _worker(rank, init_file, results):
    os.environ.pop("LOCAL_RANK", None)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=WORLD)
    try:
        group, _ = dist.new_subgroups_by_enumeration(consecutive_rank_groups(WORLD, RANKS_PER_GROUP))
        torch.manual_seed(0)
        data = torch.randn(WORLD * PER_RANK, CHANNELS, 4, 4, dtype=torch.float64)
        upstream = torch.randn_like(data)
        bn = GroupBatchNorm(CHANNELS, process_group=group).double()
        with torch.no_grad():
            bn.weight.copy_(torch.linspace(0.5, 1.5, CHANNELS))
            bn.bias.copy_(torch.linspace(-1, 1, CHANNELS))
        mine = slice(rank * PER_RANK, (rank + 1) * PER_RANK)
        x = data[mine].clone().requires_grad_(True)
        y = bn(x)
        (y * upstream[mine]).sum().backward()

        first = rank // RANKS_PER_GROUP * RANKS_PER_GROUP * PER_RANK  # this group's samples in `data`
        span = slice(first, first + RANKS_PER_GROUP * PER_RANK)
        ref_x = data[span].clone().requires_grad_(True)
        ref = F.batch_norm(ref_x, None, None, bn.weight.detach(), bn.bias.detach(), True, 0.0, bn.eps)
        (ref * upstream[span]).sum().backward()
        local = slice(rank % RANKS_PER_GROUP * PER_RANK, (rank % RANKS_PER_GROUP + 1) * PER_RANK)
        results[rank] = (
            torch.allclose(y, ref[local]),
            torch.allclose(x.grad, ref_x.grad[local]),
            torch.allclose(bn.running_mean, 0.9 * 0 + 0.1 * data[span].mean(dim=(0, 2, 3))),
        )
    finally:
        dist.destroy_process_group()


def test_bn_over_rank_groups_equals_bn_over_their_concatenated_batch(tmp_path):
    manager = mp.Manager()
    results = manager.dict()
    mp.spawn(_worker, args=(str(tmp_path / "rendezvous"), results), nprocs=WORLD, join=True)
    assert dict(results) == {rank: (True, True, True) for rank in range(WORLD)}
