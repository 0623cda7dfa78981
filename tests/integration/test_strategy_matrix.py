"""Every data-parallel strategy x every layer-wise optimizer against one oracle: a single-process run.

Two gloo processes train a small conv net with BatchNorm, biases and a never-called head through Lightning's
real ``Trainer`` and our strategies (``ddp``, ``ddp_bucketed`` from the shipped config with and without the
hook's gradient norms, ``fsdp2``, ``fsdp1`` = Lightning's ``FSDPStrategy`` over raw FSDP1 with
``device_id=cpu``, wrapped before ``configure_optimizers`` as Lightning does). After a few steps the full
parameters must equal one process that runs the same optimizer on the same samples.

The oracle is plain autograd: both half-batches through the unwrapped model, loss = mean of the two
half-batch losses (BN statistics per half, as each rank computes them). DDP and FSDP average gradients over
the ranks, so the gradients agree up to fp32 summation order; nothing but the parallel wrapper differs.

One spawn per strategy; the optimizers loop inside (spawning costs more than the steps).
"""

from __future__ import annotations

import os
import time
from datetime import timedelta
from queue import Empty

import lightning as L
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from helpers import free_port, group_config
from hydra.utils import instantiate
from torch import nn
from torch.distributed.fsdp import FullyShardedDataParallel
from torch.distributed.tensor import DTensor
from torch.utils.data import DataLoader

from lightning_lars.optim.lamb import LAMB
from lightning_lars.optim.lars import FORMS, LARS
from lightning_lars.optim.neumann import Neumann
from lightning_lars.optim.nlcg import NLCG
from lightning_lars.optim.param_groups import FSDP1_PREFIX, param_groups
from lightning_lars.parallel.fsdp import FSDP1Strategy, FSDP2Strategy

pytestmark = pytest.mark.slow
WORLD, PER_RANK, STEPS, WEIGHT_DECAY = 2, 4, 4, 1e-2
# fp32 on both sides. The two runs sum the same per-sample gradients in a different order (autograd over
# the concatenated halves vs an all-reduce of two half-batch means): ~1e-7 relative in each gradient,
# which the trust ratio and momentum carry through STEPS steps. A relative error of 1e-4 of how far the
# weights moved leaves that noise a 100x margin, while every bug this guards against is O(1): a wrong
# exclusion (SGD instead of LARS: trust ratio 1 vs ~0.01) or per-shard norms (off by up to sqrt(2)).
RELATIVE_TOLERANCE = 1e-4
COLLECTIVE_TIMEOUT = timedelta(seconds=60)

OPTIMIZERS = {
    **{
        f"lars_{form}": (LARS, "ndim<=1", {"momentum": 0.9, "form": form, "trust_coefficient": 0.02})
        for form in FORMS
    },
    "lars_rule_none": (LARS, "none", {"momentum": 0.9, "form": "nvidia", "trust_coefficient": 0.02}),
    "lamb": (LAMB, "ndim<=1", {"max_grad_norm": 0.5}),
    # global inner products; a line-search check at step 3 on the ranks' averaged loss EMAs: EMA ratio 1.024, band
    # (1.0125, 1.025] at tau 0.5: base lr x0.975 and 10 % of the previous direction taken back
    "nlcg": (
        NLCG,
        "ndim<=1",
        {
            "update_rule": "PR",
            "trust_coefficient": 0.02,
            "line_search_period": 3,
            "line_search_threshold": 0.5,
        },
    ),
    # step 1 SGD burn-in, step 2 the reset, steps 3-4 Neumann updates with one norm ||w - v|| over the whole
    # model (v stayed at w_0 through the burn-in: r ~ 1e-2). alpha and beta (ours) make the cubic and the
    # repulsive terms each ~10 % of d there, so a per-shard r (off by up to sqrt(2)) moves the weights by O(1e-2)
    "neumann": (
        Neumann,
        "ndim<=1",
        {"sgd_steps": 1, "reset_steps": 0, "alpha": 1e3, "beta": 2e-8, "gamma": 0.5},
    ),
}


def lr_at(step: int, optimizer: str) -> float:
    """A changing lr, so the LARS forms (lr inside or outside the momentum buffer) really differ."""
    return (0.5 if optimizer.startswith("lars") else 0.01) * (step + 1)


class Net(nn.Module):
    """Odd widths: FSDP shards are uneven and some ranks hold nothing of small tensors. Convolutions before
    BN have no bias, as in ResNets: BN cancels such a bias, its gradient is rounding noise, and Adam (LAMB)
    would turn that noise into full-size steps that differ between any two summation orders."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.body = nn.Sequential(
            nn.Conv2d(3, 6, 3, bias=False),
            nn.BatchNorm2d(6),
            nn.ReLU(),
            nn.Conv2d(6, 5, 3, bias=False),
            nn.BatchNorm2d(5),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
            nn.Linear(5, 7),
        )
        self.unused_head = nn.Linear(5, 3)  # never called: its gradient stays None, as in the oracle

    def forward(self, images):
        return self.body(images)


def make_optimizer(model: nn.Module, name: str) -> torch.optim.Optimizer:
    cls, rule, kwargs = OPTIMIZERS[name]
    # as ImageClassifier.configure_optimizers: groups from the (possibly already wrapped) model
    return cls(
        param_groups(model, WEIGHT_DECAY, rule), lr=lr_at(0, name), weight_decay=WEIGHT_DECAY, **kwargs
    )


def batches() -> list[tuple[torch.Tensor, torch.Tensor]]:
    generator = torch.Generator().manual_seed(1)
    return [
        (
            torch.randn(WORLD * PER_RANK, 3, 8, 8, generator=generator),
            torch.randint(0, 7, (WORLD * PER_RANK,), generator=generator),
        )
        for _ in range(STEPS)
    ]


def reference(name: str) -> dict[str, torch.Tensor]:
    model = Net()
    optimizer = make_optimizer(model, name)
    for step, (images, labels) in enumerate(batches()):
        for group in optimizer.param_groups:
            group["lr"] = lr_at(step, name)
        optimizer.zero_grad()
        halves = zip(images.split(PER_RANK), labels.split(PER_RANK))
        loss = sum(nn.functional.cross_entropy(model(x), y) for x, y in halves) / WORLD
        loss.backward()
        optimizer.step(lambda loss=loss: loss.detach())  # the global-batch loss, for NLCG's line search
    return {n: p.detach().clone() for n, p in model.named_parameters()}


class Module(L.LightningModule):
    def __init__(self, optimizer: str):
        super().__init__()
        self.net, self.optimizer_name = Net(), optimizer

    def on_train_batch_start(self, batch, batch_idx):
        for group in self.trainer.optimizers[0].param_groups:
            group["lr"] = lr_at(self.global_step, self.optimizer_name)

    def training_step(self, batch, batch_idx):
        images, labels = batch
        return nn.functional.cross_entropy(self.net(images), labels)

    def configure_optimizers(self):
        return make_optimizer(self.net, self.optimizer_name)


def make_strategy(kind: str):
    # A collective that waits for a rank that never joins (norm vectors of different lengths) fails after
    # COLLECTIVE_TIMEOUT instead of hanging the suite; the first strategy's setting holds for the process group.
    if kind == "ddp":
        return instantiate(
            group_config("strategy", "ddp"),
            find_unused_parameters=True,
            timeout=COLLECTIVE_TIMEOUT,
        )
    if kind.startswith("ddp_bucketed"):
        cfg = group_config("strategy", "ddp_bucketed")  # the shipped config, KiB-sized here
        cfg.bucket_cap_mb = 0.001
        cfg.ddp_comm_state.group_caps_mb = [0.001, 0.004]
        cfg.ddp_comm_state.compute_grad_norms = kind.endswith("hook_norms")
        return instantiate(cfg, find_unused_parameters=True, timeout=COLLECTIVE_TIMEOUT)
    if kind == "fsdp2":
        return FSDP2Strategy(timeout=COLLECTIVE_TIMEOUT)
    # a unit per layer: uneven shards
    return FSDP1Strategy(min_params_per_unit=10, timeout=COLLECTIVE_TIMEOUT)


def full_parameters(module: Module, trainer: L.Trainer) -> dict[str, torch.Tensor]:
    if isinstance(trainer.strategy, FSDP1Strategy):
        with FullyShardedDataParallel.summon_full_params(trainer.strategy.model, writeback=False):
            return {n.replace(FSDP1_PREFIX, ""): p.detach().clone() for n, p in module.net.named_parameters()}
    return {
        n: (p.full_tensor() if isinstance(p, DTensor) else p).detach().clone()
        for n, p in module.net.named_parameters()
    }


def train_and_compare(rank: int, kind: str, name: str) -> str | None:
    """Train ``name`` under strategy ``kind`` on this rank's halves; None if it equals the oracle, else why not."""
    own = [
        (x[rank * PER_RANK : (rank + 1) * PER_RANK], y[rank * PER_RANK : (rank + 1) * PER_RANK])
        for x, y in batches()
    ]
    module = Module(name)
    trainer = L.Trainer(
        accelerator="cpu",
        devices=WORLD,
        strategy=make_strategy(kind),
        max_steps=STEPS,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        use_distributed_sampler=False,
    )
    trainer.fit(module, DataLoader(own, batch_size=None))
    why_not = strategy_did_its_part(trainer, kind)
    if why_not:
        return why_not
    got, expected, initial = full_parameters(module, trainer), reference(name), dict(Net().named_parameters())
    if got.keys() != expected.keys():
        return f"parameter names {sorted(got)} != {sorted(expected)}"
    moved = max((expected[n] - initial[n]).abs().max().item() for n in expected)
    assert moved > 1e-3, f"{name}: the reference did not train; the comparison would be empty"
    if not torch.equal(got["unused_head.weight"], initial["unused_head.weight"]):
        return "the never-called head moved (a zero gradient was decayed or adapted)"
    errors = {n: (got[n] - expected[n]).abs().max().item() for n in expected}
    worst = max(errors, key=errors.get)
    if errors[worst] > RELATIVE_TOLERANCE * moved:
        return f"max error {errors[worst]:.3g} in {worst}, weights moved {moved:.3g}"
    if os.environ.get("MATRIX_REPORT"):
        print(f"matrix {kind} {name}: relative error {errors[worst] / moved:.2g}", flush=True)
    return None


def strategy_did_its_part(trainer: L.Trainer, kind: str) -> str | None:
    """What equal weights alone would not show: the hook really ran (Lightning ignores hooks on CPU), the
    optimizer really took the hook's norms, and FSDP's per-rank BN running statistics are averaged before
    validation (oracle: the mean of every rank's own buffers)."""
    strategy, optimizer = trainer.strategy, trainer.optimizers[0]
    if kind.startswith("ddp_bucketed"):
        state = strategy._ddp_comm_state
        if state.num_allreduces < STEPS:
            return f"the comm hook launched {state.num_allreduces} all-reduces in {STEPS} steps"
        if (
            kind.endswith("hook_norms")
            and isinstance(optimizer, LARS)
            and optimizer.grad_norm_source is not state
        ):
            return "LARS did not take its gradient norms from the hook"
    if kind.startswith("fsdp"):
        bn = trainer.lightning_module.net.body[1]
        own = torch.cat([bn.running_mean, bn.running_var])
        everyone = [torch.empty_like(own) for _ in range(WORLD)]
        dist.all_gather(everyone, own)
        if torch.equal(everyone[0], everyone[1]):
            return "the ranks' BN statistics were equal before averaging: the check would be empty"
        strategy.on_validation_start()
        torch.testing.assert_close(
            torch.cat([bn.running_mean, bn.running_var]), torch.stack(everyone).mean(0)
        )
    return None


def worker(rank: int, port: int, queue) -> None:
    # LOCAL_RANK set: Lightning treats the processes as started externally (one per rank, as under srun).
    os.environ.update(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        LOCAL_RANK=str(rank),
        NODE_RANK="0",
        WORLD_SIZE=str(WORLD),
        RANK=str(rank),
    )
    results = {}
    for kind in KINDS:
        for name in OPTIMIZERS:
            queue.put(("started", rank, (kind, name)))  # names the run if this process dies in it
            try:
                results[kind, name] = train_and_compare(rank, kind, name)
            except Exception as error:  # noqa: BLE001  (a mismatched collective raises here; report, go on)
                results[kind, name] = f"raised {type(error).__name__}: {str(error).splitlines()[0][:300]}"
    queue.put(("done", rank, results))


KINDS = ["ddp", "ddp_bucketed", "ddp_bucketed_hook_norms", "fsdp2", "fsdp1"]


@pytest.fixture(scope="module")
def outcomes() -> dict:
    """One spawn for the whole matrix: starting two interpreters costs far more than the 25 short fits."""
    queue = mp.get_context("spawn").Queue()
    processes = mp.start_processes(
        worker, args=(free_port(), queue), nprocs=WORLD, join=False, start_method="spawn"
    )
    per_rank, running, deadline = {}, {}, time.monotonic() + 600
    try:
        while len(per_rank) < WORLD:
            try:
                event, rank, payload = queue.get(timeout=5)
            except Empty:
                # gloo aborts the process on a size mismatch ("Is there a distributed collective mismatch?")
                died = [p.exitcode for p in processes.processes if p.exitcode not in (None, 0)]
                if died or time.monotonic() > deadline:
                    pytest.fail(
                        f"a rank {'died (exit codes ' + str(died) + ')' if died else 'hung'} in {running}"
                    )
                continue
            if event == "started":
                running[rank] = payload
            else:
                per_rank[rank] = payload
    finally:
        for process in processes.processes:
            process.join(timeout=30)
            if process.is_alive():
                process.terminate()  # a collective that hangs must not hang the suite
    return per_rank


@pytest.mark.parametrize("kind", KINDS)
def test_two_ranks_train_like_one_process(outcomes, kind):
    failures = [
        f"rank {rank} {name}: {why}"
        for rank, results in sorted(outcomes.items())
        for (k, name), why in results.items()
        if k == kind and why is not None
    ]
    assert not failures, "\n".join(failures)
