import pytest

from lightning_lars.core.errors import UserError
from lightning_lars.schedules.scaling import plan_batch, scale_lr


def test_scale_lr_is_linear_in_the_global_batch():
    assert scale_lr(0.1, 256, 8192) == pytest.approx(3.2)  # Goyal et al.: 0.1 per 256 -> 3.2 at 8k
    assert scale_lr(13.0, 86016, 86016) == pytest.approx(13.0)  # quoted at the paper's batch: unchanged
    assert scale_lr(13.0, 86016, 43008) == pytest.approx(6.5)


@pytest.mark.parametrize(
    "global_size, devices, nodes, cap, per_device, accumulation",
    [
        (8192, 8, 32, None, 32, 1),  # Goyal: 256 GPUs x 32
        (8192, 8, 1, 256, 256, 4),  # the same math on one 8-GPU node: 4 accumulation steps
        (32768, 1, 1, 256, 256, 128),
        (86016, 8, 256, None, 42, 1),  # Fujitsu: 2048 GPUs x 42
        (3264, 8, 1, 300, 204, 2),  # 408 per GPU does not fit 300: the smallest exact split does
        (64, 1, 1, 32, 32, 2),
    ],
)
def test_plan_keeps_the_global_batch_exact(global_size, devices, nodes, cap, per_device, accumulation):
    plan = plan_batch(global_size, devices, nodes, cap)
    assert (plan.per_device, plan.accumulation) == (per_device, accumulation)
    assert plan.per_device * plan.accumulation * devices * nodes == global_size
    assert cap is None or plan.per_device <= cap


def test_plan_refuses_a_batch_that_does_not_divide():
    with pytest.raises(UserError, match="does not divide across 3 devices"):
        plan_batch(8192, 3)
