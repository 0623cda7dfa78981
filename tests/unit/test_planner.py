"""Bucket planner against real things: torch's FLOP counter and published FLOPs, a real backward's gradient
order, real DDP's buckets (default and bucket_cap_mb_list), and the seed run's logged step time."""

import math
import re

import pytest
import timm
import torch
import torch.distributed as dist
from helpers import free_port
from torch.nn.parallel import DistributedDataParallel

from lightning_lars.parallel.backward_profile import (
    Device,
    Profile,
    count_costs,
    flops_profile,
    timed_profile,
)
from lightning_lars.parallel.bucket_hook import MIB, plan_groups
from lightning_lars.parallel.comm_schedule import bucket_schedule, grouped_schedule
from lightning_lars.parallel.network import ABCI, Cluster
from lightning_lars.parallel.planner import (
    DDP_DEFAULT_CAPS_MB,
    SEED_STEP_S,
    calibrate,
    main,
    propose_caps,
    step_s,
)

V100ISH = Device(30e12, 900e9)


@pytest.fixture(scope="module")
def profile() -> Profile:
    return flops_profile("resnet18", 2, V100ISH, image_size=64)


def module_order(names: list[str]) -> list[str]:
    return list(dict.fromkeys(name.rsplit(".", 1)[0] for name in names))


def test_flops_match_the_published_resnet18_and_the_profile_is_deterministic():
    costs = count_costs.__wrapped__("resnet18", 1, 224)
    forward = sum(c.forward_flops for c in costs)
    # He et al. 2016, Table 1: ResNet-18 1.8e9 FLOPs (multiply-adds) per 224 px image; 2 FLOPs per MAC
    assert 2 * 1.75e9 < forward < 2 * 1.85e9
    assert costs == count_costs.__wrapped__("resnet18", 1, 224)  # meta device: no timing, no noise
    first = costs[0]
    assert first.backward_flops == first.forward_flops  # the stem computes no input gradient
    assert sum(c.backward_flops for c in costs) == 2 * forward - first.forward_flops


def test_profile_order_is_a_real_backward_order(profile):
    model = timm.create_model("resnet18", num_classes=1000)
    ready = []
    for name, param in model.named_parameters():
        param.register_post_accumulate_grad_hook(lambda p, name=name: ready.append(name))
    model(torch.randn(2, 3, 64, 64)).sum().backward()
    assert module_order(profile.names) == module_order(ready)
    assert sorted(profile.names) == sorted(ready) and profile.ready_s == sorted(profile.ready_s)
    assert sum(profile.num_bytes) == 4 * sum(p.numel() for p in model.parameters())


@pytest.fixture
def one_process_group():
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


@pytest.mark.parametrize("caps", [None, [2.0, 8.0]])
def test_planned_buckets_are_the_buckets_real_ddp_builds(one_process_group, caps):
    """DDP's default (1 MiB first bucket, then 25 MiB) and bucket_cap_mb_list, after DDP rebuilds its
    buckets in gradient-ready order: the planner's rule gives the same buckets from the same order."""
    model = timm.create_model("resnet18", num_classes=1000)
    names = {p: n for n, p in model.named_parameters()}
    ready = []
    for name, param in model.named_parameters():
        param.register_post_accumulate_grad_hook(lambda p, name=name: ready.append(name))
    ddp = (
        DistributedDataParallel(model)
        if caps is None
        else DistributedDataParallel(model, bucket_cap_mb_list=caps)
    )
    buckets = []

    def record(state, bucket):
        buckets.append(sorted(names[p] for p in bucket.parameters()))
        future = torch.futures.Future()
        future.set_result(bucket.buffer())
        return future

    ddp.register_comm_hook(None, record)
    for _ in range(2):  # DDP rebuilds its buckets in the order of the first backward
        buckets.clear()
        ready.clear()
        ddp(torch.randn(2, 3, 32, 32)).sum().backward()
    sizes = {n: 4 * p.numel() for n, p in model.named_parameters()}
    planned = plan_groups([sizes[n] for n in ready], caps or DDP_DEFAULT_CAPS_MB)
    assert [sorted(ready[i] for i in bucket) for bucket in planned] == buckets
    assert len(buckets) >= 3


def test_network_models():
    cluster = Cluster(
        gpus_per_node=4,
        nic_bandwidth=25e9,
        intra_bandwidth=50e9,
        inter_latency=1e-5,
        intra_latency=3e-6,
        nics_per_node=2,
    )
    n = 1e8
    assert cluster.shape(8) == (2, 4) and cluster.shape(2) == (1, 2)
    # one node: no NIC is involved; torus = reduce-scatter + all-gather = ring inside the node
    assert math.isclose(cluster.torus2d(n, 4), 2 * (3 * 3e-6 + 0.75 * n / 50e9))
    assert math.isclose(cluster.ring(n, 4), 6 * 3e-6 + 1.5 * n / 50e9)
    # 2 nodes x 4: torus columns of n/4 bytes, each GPU a quarter of the NICs -> n bytes per node in all
    inside = 2 * (3 * 3e-6 + 0.75 * n / 50e9)
    assert math.isclose(
        cluster.torus2d(n, 8), inside + min(2 * 1e-5 + n / 4 / (25e9 / 4), 2 * 1e-5 + 2 * n / 4 / (25e9 / 4))
    )
    assert math.isclose(cluster.hierarchical(n, 8), inside + 2 * 1e-5 + n / 12.5e9)  # leader: one NIC
    assert cluster.torus2d(n, 8) < cluster.hierarchical(n, 8)  # every NIC busy vs one per node
    for gpus in (8, 512, 4096):
        assert cluster.nccl(n, gpus) == min(cluster.ring(n, gpus), cluster.tree(n, gpus))
    assert cluster.tree(1e4, 4096) < cluster.ring(1e4, 4096)  # small messages at scale: NCCL's trees


@pytest.mark.parametrize("algorithm", ["nccl", "torus2d", "hierarchical"])
@pytest.mark.parametrize("gpus", [8, 4096])
def test_every_bucket_is_communicated_exactly_once_after_it_is_ready(profile, algorithm, gpus):
    caps, _ = propose_caps(lambda c: grouped_schedule(profile, c, ABCI, algorithm, gpus))
    for schedule, bucket_caps in (
        (bucket_schedule(profile, DDP_DEFAULT_CAPS_MB, ABCI, algorithm, gpus), DDP_DEFAULT_CAPS_MB),
        (grouped_schedule(profile, caps, ABCI, algorithm, gpus), [1.0]),
    ):
        buckets = plan_groups(profile.num_bytes, bucket_caps)
        assert sorted(b for group in schedule.groups for b in group) == list(range(len(buckets)))
        previous_end = 0.0
        for group, start, end in zip(schedule.groups, schedule.start_s, schedule.end_s):
            assert start >= profile.ready_s[buckets[group[-1]][-1]] and start >= previous_end
            previous_end = end
        assert math.isclose(schedule.exposed_s, max(0.0, previous_end - profile.backward_s), abs_tol=1e-12)


def uniform_profile(num_layers=64, layer_mb=1.5, backward_s=0.1) -> Profile:
    return Profile(
        "uniform",
        1,
        "none",
        0.0,
        backward_s,
        [f"l{i}" for i in range(num_layers)],
        [int(layer_mb * MIB)] * num_layers,
        [backward_s * (i + 1) / num_layers for i in range(num_layers)],
    )


def test_small_first_buckets_hide_more_than_ddp_default_when_bandwidth_bound():
    profile = uniform_profile()
    slow = Cluster(4, nic_bandwidth=2e9, intra_bandwidth=50e9, inter_latency=0.0, intra_latency=0.0)
    default = bucket_schedule(profile, DDP_DEFAULT_CAPS_MB, slow, "nccl", 64)
    caps, best = propose_caps(lambda c: bucket_schedule(profile, c, slow, "nccl", 64))
    assert best.exposed_s < default.exposed_s / 2 and caps[0] <= 2.0
    grouped = grouped_schedule(profile, caps, slow, "nccl", 64, copy_s_per_byte=4 / 900e9)
    assert grouped.exposed_s >= best.exposed_s  # same groups at best, plus the hook's copies


def test_calibration_reproduces_the_target_step_and_the_seed_log_value():
    assert math.isclose(SEED_STEP_S * 1e3, 48.87, abs_tol=0.01)  # 0.733 s per 15-step epoch, result_0.txt
    costs = count_costs("resnet18", 42)
    device = calibrate(costs, target_s=0.020)
    profile = timed_profile(costs, device)
    _, schedule = propose_caps(lambda c: grouped_schedule(profile, c, ABCI, "nccl", 2048, 0.5, 4 / 900e9))
    assert math.isclose(step_s(profile, schedule, device), 0.020, rel_tol=1e-3)


def test_cli_prints_a_row_per_gpu_count(capsys):
    main(
        [
            "--arch",
            "resnet18",
            "--batch-size",
            "2",
            "--image-size",
            "64",
            "--tflops",
            "20",
            "--gpus",
            "8",
            "2048",
        ]
    )
    out = capsys.readouterr().out
    assert re.findall(r"^\| (\d+) \(", out, flags=re.MULTILINE) == ["8", "2048"] and "20.0 TFLOP/s" in out


def test_cli_bad_profile_is_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(
            [
                "--arch",
                "resnet18",
                "--batch-size",
                "2",
                "--tflops",
                "20",
                "--profile",
                str(tmp_path / "missing.json"),
            ]
        )
    assert exit_info.value.code == 2 and capsys.readouterr().out.startswith("error: cannot read profile")
