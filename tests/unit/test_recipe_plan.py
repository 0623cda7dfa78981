"""The plan a recipe runs: epoch counts and eval steps against the sources' own code, written out here;
one-line errors for the mistakes only the planned run shows; the card for every recipe. (Mistakes in the keys
themselves, found while the config is composed: tests/unit/test_schema.py.)"""

from __future__ import annotations

import math

import pytest
from omegaconf import OmegaConf

from lightning_lars.config.recipes import recipe_names
from lightning_lars.core.errors import UserError
from lightning_lars.recipe.card import card, named_steps
from lightning_lars.recipe.epoch_steps import count_steps_per_epoch
from lightning_lars.recipe.keys import eval_steps
from lightning_lars.recipe.plan import check_command_line
from lightning_lars.training.recipe_plan import plan_recipe

IMAGENET = 1_281_167


def mxnet_get_epoch_size(num_examples: int, num_workers: int, batch_size: int) -> int:
    """NVIDIA/Fujitsu MLPerf v0.6 MXNet, common/fit.py `get_epoch_size` (as the source writes it)."""
    return math.ceil(int(num_examples / num_workers) / batch_size)


def mxnet_eval_epochs(num_epoch: int, eval_period: int, eval_offset: int) -> list[int]:
    """The same file's `mlperf_fit`: after 0-based epoch `epoch`, evaluate `if epoch % eval_period == eval_offset`.
    Returned 1-based (epochs completed at the evaluation)."""
    return [epoch + 1 for epoch in range(num_epoch) if epoch % eval_period == eval_offset]


@pytest.mark.parametrize(
    "global_batch, workers", [(59904, 1536), (86016, 2048), (3264, 8), (32768, 1), (96, 3)]
)
def test_padded_epoch_is_mxnet_get_epoch_size(global_batch, workers):
    assert count_steps_per_epoch(IMAGENET, global_batch, "padded", workers) == mxnet_get_epoch_size(
        IMAGENET, workers, global_batch // workers
    )


def test_drop_last_and_fixed_counts():
    # torch DataLoader(drop_last=True) length
    assert count_steps_per_epoch(IMAGENET, 32768, "drop_last") == 39
    assert count_steps_per_epoch(IMAGENET, 32768, "fixed", steps=40) == 40


@pytest.mark.parametrize(
    "epochs, period, offset", [(37, 4, 0), (90, 4, 3), (90, 4, 1), (41, 4, 2), (10, 1, 0)]
)
def test_eval_epochs_follow_mlperf_eval_offset_and_end_with_the_final_step(epochs, period, offset):
    spe = 22
    cfg = OmegaConf.create(
        {
            "evaluation": {
                "every_n_epochs": period,
                "every_n_steps": None,
                "offset_epochs": offset,
                "offset_steps": 0,
            }
        }
    )
    ends = [spe * (e + 1) for e in range(epochs)]
    steps = eval_steps("r", cfg, ends, epochs * spe)
    expected = [e * spe for e in mxnet_eval_epochs(epochs, period, offset)]
    assert steps == sorted(set(expected) | {epochs * spe})  # the source's evals, plus ours at the final step


def test_eval_every_n_steps_with_offset():
    cfg = OmegaConf.create({"evaluation": {"every_n_epochs": None, "every_n_steps": 100, "offset_steps": 50}})
    assert eval_steps("r", cfg, [39], 420) == [150, 250, 350, 420]


@pytest.mark.parametrize(
    "overrides, key",
    [
        (
            ["epoch_length.mode=padded", "epoch_length.workers=3"],
            "epoch_length.workers",
        ),  # 3 does not divide 128
        (["evaluation.offset_epochs=8"], "evaluation.offset_epochs"),  # the demo has 8 epochs
        (
            ["evaluation.every_n_epochs=null", "evaluation.every_n_steps=10", "evaluation.offset_steps=312"],
            "evaluation.offset_steps",
        ),  # the demo has 312 steps
    ],
)
def test_what_only_the_planned_run_shows_fails_at_composition_naming_recipe_and_key(overrides, key):
    with pytest.raises(UserError) as raised:
        check_command_line(["recipe=demo", *overrides])
    message = str(raised.value)
    assert message.startswith(f"recipe demo: {key}") and "\n" not in message, message


def test_deviations_are_kept_as_given():
    entry = {"technique": "BN span", "published": "32 per GPU", "ours": "16 (ghost)", "why": "memory"}
    given = "deviations=[{technique: 'BN span', published: '32 per GPU', ours: '16 (ghost)', why: memory}]"
    assert plan_recipe("demo", overrides=[given]).deviations == [entry]


def test_demo_plan_counts():
    plan = plan_recipe("demo")  # 5000 images, batch 128, 8 epochs, warmup 2 epochs, eval every epoch
    assert (plan.steps_per_epoch, plan.total_steps, plan.warmup_steps) == (39, 312, 78)
    assert plan.eval_steps == [39 * e for e in range(1, 9)]
    assert plan.lr(0) == 0.0 and plan.lr(78) == pytest.approx(5.0)
    assert plan.epoch_at(plan.eval_steps[2]) == 3.0


@pytest.mark.parametrize("name", recipe_names())
def test_every_recipe_has_a_card(name):
    try:
        plan = plan_recipe(name, devices=8, nodes=2)
    except UserError as err:  # a recipe that fails a check names the key to change
        pytest.fail(f"{name}: {err}")
    text = card(plan, 8, 2)
    assert all(line in text for line in plan.describe())
    assert plan.eval_steps[-1] == plan.total_steps  # no recipe ends on an unevaluated step
    for _, step in named_steps(plan):
        values = plan.values(step)
        assert math.isfinite(values["lr"]) and values["lr"] >= 0 and values["global_batch"] > 0


def test_card_plot_draws_each_schedule_with_the_evaluations_marked(tmp_path):
    from PIL import Image

    from lightning_lars.recipe.card import plot

    plan = plan_recipe("mikami_68k", devices=8, nodes=4)  # batch growth: a fourth panel
    path = plot(plan, tmp_path / "card.png")
    image = Image.open(path).convert("RGB")
    width, height = image.size
    panels = 4  # lr, weight decay, momentum, global batch (it grows at epoch 5)
    pixels = ((x, y, *image.getpixel((x, y))) for x in range(0, width, 2) for y in range(0, height, 2))
    red = [(x, y) for x, y, r, g, b in pixels if r > 180 and g < 80 and b < 80]  # matplotlib's tab:red
    assert red, "no evaluation markers"
    bands = {min(panels - 1, int(y / height * panels)) for _, y in red}
    assert bands == set(range(panels)), bands  # markers on every panel
