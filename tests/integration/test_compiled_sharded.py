"""The compiled LARS/LAMB step under FSDP2 and FSDP1 takes the unsharded model's steps (2 processes, gloo, CPU).

The cases and checks of ``test_sharded_optim`` with ``implementation="compiled"``: whole-tensor norms are
reduced between the compiled functions, so the sharded weights must equal the unsharded ones. A compile
that fell back to eager would make this a second eager test, so the fallback's warning is an error here.
Two cases (one LARS, LAMB): compiling costs seconds per case on a CPU.
"""

from __future__ import annotations

import os
import warnings

import pytest
import test_sharded_optim
import torch.distributed as dist
import torch.multiprocessing as mp
from helpers import free_port

COMPILED_CASES = ("lars_mlperf_nesterov", "lamb")


def _worker(rank: int, port: int, queue) -> None:
    warnings.filterwarnings("error", message="compiling the optimizer step failed")
    for case in COMPILED_CASES:  # this process's copy of the cases
        test_sharded_optim.CASES[case][1]["implementation"] = "compiled"
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=test_sharded_optim.WORLD)
    try:
        results = {f"fsdp2 {case}": test_sharded_optim._run_case(rank, case) for case in COMPILED_CASES}
        results.update(
            {f"fsdp1 {case}": test_sharded_optim._fsdp1_case(rank, case) for case in COMPILED_CASES}
        )
        queue.put((rank, results))
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
def test_compiled_sharded_steps_match_unsharded():
    queue = mp.get_context("spawn").Queue()
    mp.start_processes(
        _worker, args=(free_port(), queue), nprocs=test_sharded_optim.WORLD, start_method="spawn"
    )
    results = dict(queue.get(timeout=30) for _ in range(test_sharded_optim.WORLD))
    for rank, cases in sorted(results.items()):
        for case, ((error, moved), reductions_per_step) in cases.items():
            assert moved > 1e-3, f"{case}: the weights did not move; the comparison would be empty"
            assert error < 1e-6, f"{case}, rank {rank}: sharded weights differ from unsharded by {error:.3g}"
            assert reductions_per_step == (2 if case.endswith("lamb") else 1), case
