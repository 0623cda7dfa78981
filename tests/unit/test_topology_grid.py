"""Grid hooks and weight-update sharding without processes: settings, grid resolution, ownership."""

import pytest
import torch
from helpers import group_config
from hydra.utils import instantiate

from lightning_lars.core.errors import UserError
from lightning_lars.parallel.sharded_update import ShardedUpdate, assign_owners
from lightning_lars.parallel.strategy import BucketedDDPStrategy
from lightning_lars.parallel.topology_hooks import HierarchicalAllReduceState, Torus2DAllReduceState


@pytest.mark.parametrize(
    "name, state_cls",
    [("ddp_torus2d", Torus2DAllReduceState), ("ddp_hierarchical", HierarchicalAllReduceState)],
)
def test_shipped_configs_build_the_hook_state(name, state_cls):
    strategy = instantiate(group_config("strategy", name))
    assert isinstance(strategy, BucketedDDPStrategy) and type(strategy._ddp_comm_state) is state_cls
    assert strategy._ddp_comm_state.grid is None and strategy.optimizer_sharding is False


def test_grid_comes_from_config_then_launch_then_torchrun(monkeypatch):
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    state = Torus2DAllReduceState(grid=None)
    with pytest.raises(UserError, match="grid"):
        state.resolve_grid(8)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")
    assert state.resolve_grid(8) == (2, 4)
    state.set_launch_grid(4, 2)
    assert state.resolve_grid(8) == (4, 2)
    assert Torus2DAllReduceState(grid=[8, 1]).resolve_grid(8) == (8, 1)
    with pytest.raises(UserError, match="NODES \\* DEVICES"):
        Torus2DAllReduceState(grid=[2, 2]).resolve_grid(8)


def test_bad_grid_settings_name_the_key():
    with pytest.raises(UserError, match="ddp_comm_state.grid"):
        HierarchicalAllReduceState(grid=[4])
    with pytest.raises(UserError, match="group_caps_mb"):
        HierarchicalAllReduceState(group_caps_mb=[])
    assert HierarchicalAllReduceState(group_caps_mb=None).group_cap_bytes() == 0  # one group per bucket


def test_owners_are_whole_tensors_balanced_and_the_same_everywhere():
    numels = [
        p.numel()
        for p in torch.nn.Sequential(
            torch.nn.Linear(64, 64), torch.nn.Linear(64, 10), torch.nn.Linear(10, 300)
        ).parameters()
    ]
    for world in (2, 3, 4):
        owners = assign_owners(numels, world)
        assert owners == assign_owners(numels, world) and set(owners) <= set(range(world))
        loads = [sum(n for n, o in zip(numels, owners) if o == r) for r in range(world)]
        assert max(loads) - min(loads) <= max(numels)  # greedy largest-first bound
    assert assign_owners([5, 5, 5, 5], 2) == [0, 1, 0, 1]


def test_sharding_without_a_process_group_is_one_line():
    with pytest.raises(UserError, match="optimizer_sharding"):
        ShardedUpdate(torch.optim.SGD([torch.nn.Parameter(torch.zeros(2))], lr=0.1))
