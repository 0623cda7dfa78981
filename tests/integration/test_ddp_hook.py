"""The grouped all-reduce hook on 2 gloo processes: gradients equal DDP's own all-reduce, bitwise (or within
the compression bound), and the norms it hands LARS equal the gradients' norms. Training through Lightning
with the shipped ddp_bucketed config is checked against a single process in test_strategy_matrix.py."""

import os

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from helpers import free_port, small_conv_net
from torch.nn.parallel import DistributedDataParallel

from lightning_lars.parallel.bucket_hook import GroupedAllReduceState, compression_error_bound, register

pytestmark = pytest.mark.slow
WORLD_SIZE = 2  # fp32 exactness holds for 2 ranks: a + b == b + a whatever the chunking of the ring


def compare_gradients(rank: int, port: int) -> None:
    """For each compression: 4 SGD steps of plain DDP and of the hooked DDP side by side, same data."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=WORLD_SIZE)
    for compression in (None, "bf16", "fp16"):
        plain = DistributedDataParallel(small_conv_net(), bucket_cap_mb=0.001)
        hooked = DistributedDataParallel(small_conv_net(), bucket_cap_mb=0.001)
        state = GroupedAllReduceState([0.001, 0.016], compression=compression, compute_grad_norms=True)
        register(hooked, state)
        optimizers = [torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9) for m in (plain, hooked)]
        generator = torch.Generator().manual_seed(rank)  # different data on each rank
        for step in range(4):
            images = torch.randn(4, 3, 16, 16, generator=generator)
            labels = torch.randint(0, 10, (4,), generator=generator)
            for model, optimizer in zip((plain, hooked), optimizers):
                optimizer.zero_grad()
                torch.nn.functional.cross_entropy(model(images), labels).backward()
            for (name, ref), param in zip(plain.named_parameters(), hooked.parameters()):
                where = f"rank {rank} step {step} {name} compression={compression}"
                if compression is None:
                    assert torch.equal(ref.grad, param.grad), where
                else:
                    error = (ref.grad - param.grad).abs().max().item()
                    assert error <= compression_error_bound(compression, ref.grad), where
                norm = state.pop_grad_norm(param)
                assert torch.allclose(norm, param.grad.norm(), rtol=1e-6, atol=0), where
            assert step == 0 or len(state.last_backward_groups) < sum(state.last_backward_groups), (
                "no coalescing"
            )
            if compression is not None:  # keep weights equal so every step compares like with like
                for ref, param in zip(plain.parameters(), hooked.parameters()):
                    param.grad.copy_(ref.grad)
            for optimizer in optimizers:
                optimizer.step()
    dist.destroy_process_group()


def test_hook_gradients_equal_ddp_allreduce_over_steps():
    mp.spawn(compare_gradients, args=(free_port(),), nprocs=WORLD_SIZE, join=True)
