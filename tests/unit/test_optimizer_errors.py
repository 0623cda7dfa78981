"""A bad optimizer value on the command line: the optimizer raises ValueError / TypeError as torch's do, and
`check_optimizer` turns it into one `UserError` line naming the config key, before anything is built."""

import pytest
import torch
from omegaconf import OmegaConf

from lightning_lars.core.errors import UserError
from lightning_lars.optim.lars import LARS
from lightning_lars.optim.nlcg import NLCG
from lightning_lars.training.target_checks import check_optimizer


def optimizer_config(target: str, **values):
    return OmegaConf.create({"_target_": target, "_partial_": True, **values})


@pytest.mark.parametrize(
    "cls, key, value, kind",
    [
        (LARS, "momentum", 1.0, ValueError),
        (LARS, "weight_decay", -1e-4, ValueError),
        (NLCG, "line_search_period", 0, ValueError),
        (NLCG, "line_search_period", 2.5, TypeError),
    ],
)
def test_an_optimizers_own_error_becomes_one_line_naming_the_key(cls, key, value, kind):
    with pytest.raises(kind) as raised:  # the oracle: what the optimizer itself says
        cls(_params(), **{key: value})
    with pytest.raises(UserError) as refused:
        check_optimizer(optimizer_config(f"{cls.__module__}.{cls.__name__}", **{key: value}))
    message = str(refused.value)
    assert "\n" not in message and f"optimizer.{key}" in message and str(raised.value) in message


def test_good_values_and_failures_of_no_key_pass_through():
    check_optimizer(optimizer_config("lightning_lars.optim.lars.LARS", momentum=0.9))
    check_optimizer(None)
    # an unknown keyword names no key's value: left to the real build, which says so in context
    check_optimizer(optimizer_config("lightning_lars.optim.lars.LARS", no_such_key=1))


def _params():
    return [torch.nn.Parameter(torch.zeros(2, 2))]
