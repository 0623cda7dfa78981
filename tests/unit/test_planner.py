"""Bucket planner: network models, schedules that send every bucket once, proposals, CLI."""

import json
import math
import re

import pytest

from lightning_lars.parallel.bucket_hook import MIB
from lightning_lars.parallel.network import Network, torus_shape
from lightning_lars.parallel.planner import (
    Profile,
    fixed_schedule,
    grouped_schedule,
    main,
    make_buckets,
    measure_profile,
    propose_caps,
)


@pytest.fixture(scope="module")
def profile() -> Profile:
    """A real measured backward: timm resnet18 (11.7 M parameters), 2 images of 64 px, CPU."""
    return measure_profile("resnet18", batch_size=2, image_size=64, repeats=1)


def uniform_profile(num_layers=64, layer_mb=1.5, backward_s=0.1) -> Profile:
    """Equal gradients ready at equal intervals: lets expected schedules be reasoned about."""
    return Profile("uniform", 1, "none", backward_s, [f"l{i}" for i in range(num_layers)],
                   [int(layer_mb * MIB)] * num_layers, [backward_s * (i + 1) / num_layers for i in range(num_layers)])


def test_measured_profile_is_ordered_and_complete(profile):
    assert len(profile.names) == 62 and sum(profile.num_bytes) == 4 * 11_689_512  # resnet18 fp32
    assert profile.ready_s == sorted(profile.ready_s) and 0 < profile.ready_s[-1] <= profile.backward_s
    assert profile.names[0] in ("fc.bias", "fc.weight")  # the classifier's gradients are ready first


def test_network_models():
    net = Network(latency=1e-5, bandwidth=1e9)
    assert net.ring(1e8, 1) == 0.0
    assert math.isclose(net.ring(1e8, 4), 6 * 1e-5 + 1.5 * 0.1)
    assert torus_shape(2048) == (32, 64) and torus_shape(13) == (1, 13)
    assert math.isclose(net.torus2d(1e8, 13), net.ring(1e8, 13))  # a prime count is a 1 x p ring
    assert net.torus2d(1e8, 4096) < net.ring(1e8, 4096)  # fewer latency hops at scale
    assert net.tree(1e8, 4096) < net.ring(1e8, 4096)


@pytest.mark.parametrize("algorithm", ["ring", "tree", "torus2d"])
@pytest.mark.parametrize("gpus", [8, 512, 4096])
def test_every_bucket_is_communicated_exactly_once_after_it_is_ready(profile, algorithm, gpus):
    net = Network(latency=1e-5, bandwidth=6.25e9)
    caps, _ = propose_caps(profile, net, algorithm, gpus)
    for schedule, bucket_mb in ((fixed_schedule(profile, net, algorithm, gpus), 25.0),
                                (grouped_schedule(profile, caps, net, algorithm, gpus), 1.0)):
        buckets = make_buckets(profile, [bucket_mb])
        sent = [b for group in schedule.groups for b in group]
        assert sorted(sent) == list(range(len(buckets)))  # each bucket once
        assert sorted(i for b in buckets for i in b) == list(range(len(profile.names)))  # each gradient once
        previous_end = 0.0
        for group, start, end in zip(schedule.groups, schedule.start_s, schedule.end_s):
            assert start >= profile.ready_s[buckets[group[-1]][-1]] and start >= previous_end
            previous_end = end
        assert math.isclose(schedule.exposed_s, max(0.0, previous_end - profile.backward_s), abs_tol=1e-12)


def test_bandwidth_bound_network_prefers_small_groups_over_fixed_buckets():
    profile = uniform_profile()
    net = Network(latency=0.0, bandwidth=50e9)  # no latency: only the data still unsent at the end is exposed
    caps, grouped = propose_caps(profile, net, "ring", 64)
    fixed = fixed_schedule(profile, net, "ring", 64)
    assert grouped.exposed_s < fixed.exposed_s / 4
    assert caps[0] <= 2.0  # the first group does not wait for a large bucket


def test_latency_bound_network_prefers_few_groups():
    profile = uniform_profile()
    net = Network(latency=1e-3, bandwidth=1e15)  # 1 ms per hop, free bytes
    _, grouped = propose_caps(profile, net, "ring", 64)
    many = grouped_schedule(profile, [1.0], net, "ring", 64)
    assert len(grouped.groups) < len(many.groups) and grouped.exposed_s < many.exposed_s


def test_cli_prints_a_table_from_a_profile_file(profile, tmp_path, capsys):
    path = tmp_path / "profile.json"
    path.write_text(json.dumps(profile.__dict__))
    main(["--profile", str(path), "--gpus", "8", "2048", "--backward-ms", "20", "--algorithm", "torus2d"])
    out = capsys.readouterr().out
    rows = re.findall(r"^\| (\d+) \|", out, flags=re.MULTILINE)
    assert "backward 20.0 ms" in out and rows == ["8", "2048"]


def test_cli_bad_profile_is_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--profile", str(tmp_path / "missing.json")])
    assert exit_info.value.code == 2 and capsys.readouterr().out.startswith("error: cannot read profile")
