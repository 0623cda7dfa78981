"""The same math on fewer GPUs: for any device count the plan keeps the global batch and the BN span exact."""

import pytest

from lightning_lars.core.errors import UserError
from lightning_lars.schedules.scaling import plan_batch
from tests.unit.recipe_helpers import RECIPES, recipe


def assert_exact(plan, global_size, world, bn_group, cap):
    assert plan.per_device * plan.accumulation * world == global_size
    assert cap is None or plan.per_device <= cap
    span = bn_group or plan.per_device
    if plan.bn_mode in ("local", "ghost"):
        assert plan.per_device % span == 0 and plan.bn_ranks == 1
    else:
        assert plan.per_device * plan.bn_ranks == span and world % plan.bn_ranks == 0


@pytest.mark.parametrize("name", RECIPES)
@pytest.mark.parametrize("devices, nodes", [(1, 1), (2, 1), (8, 1), (8, 4), (8, 32)])
def test_every_recipe_plans_exactly_or_refuses(name, devices, nodes):
    cfg = recipe(name)
    global_size, bn_group, cap = cfg.batch.global_size, cfg.batch.bn_group, cfg.batch.max_per_device
    try:
        plan = plan_batch(global_size, devices, nodes, cap, bn_group)
    except UserError as err:  # refusing is fine; a wrong plan is not
        assert "batch" in str(err)
        return
    assert_exact(plan, global_size, devices * nodes, bn_group, cap)


@pytest.mark.parametrize(
    "global_size, devices, nodes, cap, bn, per_device, accumulation, mode, ranks",
    [
        (8192, 8, 32, None, 32, 32, 1, "local", 1),  # Goyal as published: 256 GPUs x 32, BN over 32
        (8192, 8, 1, 256, 32, 256, 4, "ghost", 1),  # one node: 4 accumulation steps, 8 ghost groups of 32
        (32768, 1024, 1, None, 128, 32, 1, "sync", 4),  # Google: 32 per chip, BN synced over 4 chips = 128
        (32768, 8, 1, 256, 128, 256, 16, "ghost", 1),  # the same span on 8 GPUs
        (86016, 8, 1, 256, 42, 168, 64, "ghost", 1),  # Fujitsu's 42: the device batch must be a multiple
        (3264, 2, 1, 256, 408, 204, 8, "sync", 2),  # 408 > cap: two devices of 204 share one statistic
        (64, 1, 1, 32, None, 32, 2, "local", 1),
    ],
)
def test_named_plans(global_size, devices, nodes, cap, bn, per_device, accumulation, mode, ranks):
    plan = plan_batch(global_size, devices, nodes, cap, bn)
    assert (plan.per_device, plan.accumulation, plan.bn_mode, plan.bn_ranks) == (
        per_device,
        accumulation,
        mode,
        ranks,
    )
    assert_exact(plan, global_size, devices * nodes, bn, cap)


def test_refuses_a_bn_span_that_cannot_be_formed():
    # NVIDIA's 408 per GPU on one device capped at 256 images: no exact way
    with pytest.raises(UserError, match="raise batch.max_per_device to 408"):
        plan_batch(3264, 1, 1, 256, 408)
    with pytest.raises(UserError, match="bn_group=100000"):
        plan_batch(8192, 1, 1, 256, 100000)
    with pytest.raises(UserError, match="does not divide across 3 devices"):
        plan_batch(8192, 3, 1, 256, 32)


def test_describe_names_devices_batch_accumulation_and_bn():
    text = plan_batch(32768, 8, 1, 256, 128).describe()
    for part in (
        "global batch 32768",
        "8 devices x 256 images",
        "16 accumulation steps",
        "ghost BN over 128",
    ):
        assert part in text
    assert "synchronised over 128 images (4 devices x 32)" in plan_batch(32768, 1024, 1, None, 128).describe()
    assert (
        "global batch 256 = 1 device x 256 images x 1 accumulation step;"
        in plan_batch(256, 1, 1, 256, None).describe()
    )


@pytest.mark.parametrize(
    "global_size, devices, cap, bn_group, nearest",
    [
        (97, 1, 64, None, "set batch.global_size to 96 or 98"),  # a prime: only 97 x 1 image fits under 64
        (97, 1, 64, 16, "set batch.global_size to 96 or 112"),  # the cap is not what stops it
        (202, 2, 64, None, "set batch.global_size to 200 or 204"),  # 101 per device, a prime again
    ],
)
def test_a_plan_that_leaves_bn_a_single_image_names_the_nearest_global_batches(
    global_size, devices, cap, bn_group, nearest
):
    with pytest.raises(UserError) as refused:
        plan_batch(global_size, devices, 1, cap, bn_group)
    message = str(refused.value)
    assert nearest in message and "max_per_device to" not in message and "\n" not in message, message
    for size in map(int, nearest.rpartition(" to ")[2].split(" or ")):  # each named size does plan
        plan = plan_batch(size, devices, 1, cap, bn_group)
        assert (bn_group or plan.per_device) >= 2
        assert_exact(plan, size, devices, bn_group, cap)
    for size in range(int(nearest.split()[-3]) + 1, global_size):  # and none nearer below does
        with pytest.raises(UserError):
            plan_batch(size, devices, 1, cap, bn_group)
