"""Golden schedules of the MLPerf, TPU and Fujitsu recipes, taken from the primary sources.

Every value below is what the source logged or what its own code computes at that step (the transcriptions in
`tests.unit.source_oracles`), never our schedules. `plan_recipe` composes each recipe at ImageNet size
(1,281,167 train images, no data, no GPU) and must match every row within 0.1 %, the source's step counts
exactly, and evaluate at every step where the source evaluated, including the step at which the published
run crossed its target.

Sources: mlcommons/training_results_v0.6 (NVIDIA dgx2h_n96, Google tpu-v3-2048, Fujitsu abci_2048xV100),
training_results_v0.7 (Google tpu-v3-8192-TF), training_results_v1.0 (NVIDIA dgxa100), tensorflow/tpu at
b13e6b6 (2018-12-03) with configs/cloud/v3-2048.yaml (the paper's 1024 chips = 2048 cores). "log K" is the
``:::MLL``/``:::MLLOG`` key K of ``result_0.txt`` (the same in all 5 logs of a submission).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache

import pytest

from lightning_lars.training.recipe_plan import plan_recipe
from tests.unit.source_oracles import (
    FujitsuExplorerLoop,
    MXNetPolySchedule,
    N,
    mxnet_lrs,
    tf_poly_rate_schedule,
)


@dataclass
class Golden:
    steps_per_epoch: int | None  # as the source counted an epoch
    total_steps: int | None
    eval_steps: list[int] | None  # every step after which the source evaluated
    crossed_at: int | None  # the eval step at which the published run first reached its target
    rows: dict[int, dict] = field(default_factory=dict)  # step -> {lr, weight_decay, momentum, global_batch}
    # the step at which the source's warmup ends (its post-warmup clock's zero)
    warmup_steps: int | None = None
    # warmup + the source's decay steps: where its LR would reach its end value
    decay_end_step: int | None = None


def _rows(steps, lrs, *, weight_decay, momentum, global_batch):
    """Rows at ``steps``: ``lrs`` and ``weight_decay`` are per-update lists (or one constant), the rest constant."""

    def pick(value, step):
        return value[step] if isinstance(value, list) else value

    return {
        s: {
            "lr": lrs[s],
            "weight_decay": pick(weight_decay, s),
            "momentum": momentum,
            "global_batch": global_batch,
        }
        for s in steps
    }


@cache
def golden(name: str) -> Golden:
    if name == "nvidia_mlperf06_60k":
        # fit.py get_epoch_size: ceil(int(N / 1536 workers) / 39) = 22; log lars_opt_learning_rate_decay_steps 1254
        # = 22 x (90 - 33); PolySchedule(base_lr=40.7 log opt_base_learning_rate, iterations 22 x 90, warmup 22 x 33
        # log opt_learning_rate_warmup_epochs 33, end 0.0 log lars_opt_end_learning_rate, power 2 log ..._poly_power)
        spe = -(-(N // 1536) // 39)
        lrs = mxnet_lrs(MXNetPolySchedule(40.7, spe * 90, spe * 33, 0.0, 2), spe * 90)
        return Golden(
            steps_per_epoch=spe,
            total_steps=spe * 90,  # config_DGX2_multi.sh NUMEPOCHS=90
            # log eval_accuracy epoch_num 2, 6, ..., 90 (EVAL_OFFSET=1)
            eval_steps=[spe * e for e in range(2, 91, 4)],
            crossed_at=spe
            * 90,  # all 5 logs: first eval_accuracy > 0.759 at epoch_num 90 (0.76068 in result_0)
            rows=_rows(
                [0, 1, 725, 726, 1000, 1979],
                lrs,
                weight_decay=2e-4,  # log lars_opt_weight_decay 0.0002
                momentum=0.9,  # fit.py --mom default 0.9
                global_batch=59904,
            ),  # log global_batch_size 59904
            warmup_steps=spe
            * 33,  # PolySchedule warmup = epoch size x log opt_learning_rate_warmup_epochs 33
            decay_end_step=spe * 33 + 1254,
        )  # + log lars_opt_learning_rate_decay_steps 1254
    if name == "nvidia_mlperf10_3264":
        # fit.py get_epoch_size: ceil(int(N / 8) / 408) = 393; PolySchedule(10.5 log lars_opt_base_learning_rate,
        # 393 x 37 (NUMEPOCHS=37), 393 x 2 (log lars_opt_learning_rate_warmup_epochs 2), end 0.0001 log
        # lars_opt_end_learning_rate, power 2 log lars_opt_learning_rate_decay_poly_power)
        spe = -(-(N // 8) // 408)
        lrs = mxnet_lrs(MXNetPolySchedule(10.5, spe * 37, spe * 2, 0.0001, 2), spe * 37)
        return Golden(
            steps_per_epoch=spe,
            total_steps=spe * 37,
            # log eval_accuracy epoch_num 3, 7, ..., 35 (EVAL_OFFSET=2, EVAL_PERIOD=4); we also evaluate the last step
            eval_steps=[spe * e for e in range(3, 36, 4)],
            crossed_at=spe * 35,  # 4 of 5 logs: eval_accuracy >= 0.759 at epoch_num 35 (0.76066 in result_0)
            rows=_rows(
                [0, 785, 786, 7000, spe * 35 - 1, spe * 37 - 1],
                lrs,
                weight_decay=5e-5,  # log lars_opt_weight_decay 5e-05
                momentum=0.9,  # log lars_opt_momentum 0.9
                global_batch=3264,
            ),  # log global_batch_size 3264
            warmup_steps=spe * 2,  # PolySchedule warmup = 393 x log lars_opt_learning_rate_warmup_epochs 2
            decay_end_step=spe * 37,
        )  # PolySchedule iterations = 393 x 37 (the log's decay_steps 37 is epochs)
    if name == "google_mlperf06_32k":
        # tpu-v3-2048 run_and_time.sh --train_steps=2983 --iterations_per_loop=157; lars_util.py poly_rate_schedule
        # with log opt_base_learning_rate 31.2, opt_learning_rate_warmup_epochs 25, lars_opt_end_learning_rate 0.0001
        lrs = [
            tf_poly_rate_schedule(s, plr=31.2, w_epochs=25, train_steps=2983, batch_size=32768)
            for s in range(2983)
        ]
        assert 2983 - (25 * N // 32768) + 1 == 2007  # log lars_opt_learning_rate_decay_steps 2007
        return Golden(
            steps_per_epoch=N // 32768,
            total_steps=2983,  # resnet_main.py steps_per_epoch = N // batch = 39
            eval_steps=list(range(157, 2984, 157)),  # one eval per 157-step loop: log epoch_num 4, 8, ..., 76
            crossed_at=2826,  # 4 of 5 logs: eval_accuracy >= 0.759 at epoch_num 72 = 2826 // 39 (0.76065, result_0)
            rows=_rows(
                [0, 976, 977, 978, 2000, 2982],
                lrs,
                weight_decay=1e-4,  # log lars_opt_weight_decay 0.0001
                momentum=0.9,  # resnet_main.py --momentum default 0.9
                global_batch=32768,
            ),  # log global_batch_size 32768
            warmup_steps=25 * N // 32768,  # lars_util.py w_steps = w_epochs * num_train_images // batch = 977
            decay_end_step=25 * N // 32768 + 2007,
        )  # + log lars_opt_learning_rate_decay_steps 2007
    if name == "google_mlperf07_64k":
        # tpu-v3-8192-TF run_and_time.sh --train_steps=1738 --iterations_per_loop=79; lars_util.py with log
        # lars_opt_base_learning_rate 24.699, lars_opt_learning_rate_warmup_epochs 31, lars_opt_end_learning_rate 0.0001
        lrs = [
            tf_poly_rate_schedule(s, plr=24.699, w_epochs=31, train_steps=1738, batch_size=65536)
            for s in range(1738)
        ]
        assert 1738 - (31 * N // 65536) + 1 == 1133  # log lars_opt_learning_rate_decay_steps 1133
        return Golden(
            steps_per_epoch=N // 65536,
            total_steps=1738,
            eval_steps=list(range(79, 1739, 79)),  # 22 evals, log epoch_num 4.0, 8.0, ..., 88.0
            crossed_at=1738,  # 4 of 5 logs: first eval_accuracy >= 0.759 at the last eval (0.76064 in result_0)
            rows=_rows(
                [0, 605, 606, 607, 1200, 1737],
                lrs,
                weight_decay=1e-4,  # log lars_opt_weight_decay 0.0001
                momentum=0.951807,  # log lars_opt_momentum 0.951807
                global_batch=65536,
            ),  # log global_batch_size 65536
            warmup_steps=31 * N // 65536,  # lars_util.py w_steps = 606
            decay_end_step=31 * N // 65536 + 1133,
        )  # + log lars_opt_learning_rate_decay_steps 1133
    if name == "ying_tpu_32k":
        # tensorflow/tpu b13e6b6 lars_util.py: batch 32768 -> plr 34.0, w_epochs 12; polynomial_decay default end
        # 0.0001; configs/cloud/v3-2048.yaml train_steps 3558; resnet_main.py train_and_eval: eval every
        # --steps_per_eval (default 1251) and at train_steps
        lrs = [
            tf_poly_rate_schedule(s, plr=34.0, w_epochs=12, train_steps=3558, batch_size=32768)
            for s in range(3558)
        ]
        return Golden(
            steps_per_epoch=N // 32768,
            total_steps=3558,
            eval_steps=[1251, 2502, 3558],
            crossed_at=3558,  # the paper's 76.3 % is the final accuracy
            rows=_rows(
                [0, 468, 469, 470, 2000, 3557],
                lrs,
                weight_decay=1e-4,  # resnet_main.py --weight_decay default 1e-4
                momentum=0.9,  # resnet_main.py --momentum default 0.9
                global_batch=32768,
            ),  # v3-2048.yaml train_batch_size
            warmup_steps=12 * N // 32768,  # lars_util.py w_steps = 469
            decay_end_step=3558 + 1,
        )  # lars_util.py: polynomial_decay over train_steps - w_steps + 1 steps after w_steps
    if name == "fujitsu_86k":
        # fit.py get_epoch_size: ceil(int(N / 2048) / 42) = 15; explorer.py + MultiFactorScheduler with log
        # opt_base_learning_rate 13.0, opt_learning_rate_warmup_epochs 36, lars_opt_learning_rate_decay_steps 780,
        # lars_opt_learning_rate_decay_poly_power 2.2, --end_lr_ratio 0.0025 (log lars_opt_end_learning_rate 0.0325)
        spe = -(-(N // 2048) // 42)
        values = FujitsuExplorerLoop(13.0, spe, 36, 780, 0.0025, 2.2).run(spe * 90)
        lrs = [lr for lr, _ in values]
        # The kernel's decay term: wds x best_wd_coeff, wds = args.wd x args.lr = 5e-5 (log lars_opt_weight_decay)
        # x 13.0 (fit.py optimizer_params 'wd')
        decay = [5e-5 * 13.0 * coefficient for _, coefficient in values]
        assert lrs[-1] == pytest.approx(0.0325)  # log lars_opt_end_learning_rate 0.0325
        return Golden(
            steps_per_epoch=spe,
            total_steps=spe * 90,  # --num-epochs 90
            # log eval_offset 1: eval_accuracy epoch_num 2, ..., 90
            eval_steps=[spe * e for e in range(2, 91, 4)],
            crossed_at=spe * 90,  # all 5 logs: first eval_accuracy > 0.759 at epoch_num 90
            rows=_rows(
                [0, 1, 538, 539, 540, 541, 900, 1319, 1320, 1349],
                lrs,
                weight_decay=decay,
                momentum=0.96,  # --mom 0.96
                global_batch=86016,
            ),  # log global_batch_size 86016
            warmup_steps=spe * 36,  # explorer warmup_step = epoch size x --warmup_epochs 36 (fit.py) = 540
            decay_end_step=spe * 36 + 780,
        )  # + log lars_opt_learning_rate_decay_steps 780: flat at 0.0325 after 1320
    if name == "fujitsu_81k":
        # arXiv 1903.12650 (abstract) publishes the batch only; every schedule value is our choice (deviations)
        return Golden(
            steps_per_epoch=None,
            total_steps=None,
            eval_steps=None,
            crossed_at=None,
            rows={0: {"global_batch": 81920}},
        )
    raise KeyError(name)


RECIPES = [
    "nvidia_mlperf06_60k",
    "nvidia_mlperf10_3264",
    "google_mlperf06_32k",
    "google_mlperf07_64k",
    "ying_tpu_32k",
    "fujitsu_86k",
    "fujitsu_81k",
]


@cache
def plan(name: str):
    return plan_recipe(name)


@pytest.mark.parametrize("name", RECIPES)
def test_values_at_named_steps_are_the_sources(name):
    expected, ours = golden(name), plan(name)
    for step, row in expected.rows.items():
        got = {
            "lr": ours.lr(step),
            "weight_decay": ours.weight_decay(step),
            "momentum": ours.momentum(step),
            "global_batch": ours.global_batch(step),
        }
        for key, value in row.items():
            assert got[key] == pytest.approx(value, rel=1e-3, abs=1e-12), (name, step, key)


@pytest.mark.parametrize("name", RECIPES)
def test_step_counts_and_evaluations_are_the_sources(name):
    expected, ours = golden(name), plan(name)
    if expected.total_steps is None:  # nothing published: the recipe must say so in its deviations
        assert any("not published" in d["published"] for d in ours.deviations)
        return
    assert ours.steps_per_epoch == expected.steps_per_epoch
    assert ours.total_steps == expected.total_steps
    assert set(expected.eval_steps) <= set(ours.eval_steps)  # every eval of the source ...
    extra = set(ours.eval_steps) - set(expected.eval_steps)
    assert extra <= {ours.total_steps}  # ... and at most the final step besides
    assert ours.eval_steps[-1] == ours.total_steps
    assert expected.crossed_at in ours.eval_steps  # time-to-target can register where the published run did


@pytest.mark.parametrize("name", [n for n in RECIPES if golden(n).warmup_steps is not None])
def test_card_reports_the_sources_warmup_and_decay_steps(name):
    """The card and the plan line print the schedule's own boundaries (TF's 977, Fujitsu's 1320), not epochs x
    steps per epoch (975, 1350): the card must equal what runs."""
    from lightning_lars.recipe.card import card

    expected, ours = golden(name), plan(name)
    phases = (expected.warmup_steps, expected.decay_end_step)
    assert (ours.lr_schedule.warmup_steps, ours.lr_schedule.decay_end_step) == phases  # the schedule's own
    assert (ours.warmup_steps, ours.decay_end_step) == phases  # as the plan line prints them
    text = card(ours, devices=1, nodes=1)
    assert f"warmup {expected.warmup_steps} steps; LR decays until step {expected.decay_end_step}" in text
    assert ours.lr(expected.warmup_steps - 2) < ours.lr(expected.warmup_steps - 1)  # still ramping there
    # Fujitsu: decays until its end, then flat to the last step
    if expected.decay_end_step < ours.total_steps:
        end = expected.decay_end_step
        assert ours.lr(end - 1) > ours.lr(end) == pytest.approx(ours.lr(ours.total_steps - 1), rel=1e-12)


def test_golden_tables_are_not_our_schedules_in_disguise():
    """The oracles disagree with the textbook forms exactly where the sources' quirks are (else they test nothing)."""
    nvidia, tf, fujitsu = golden("nvidia_mlperf06_60k"), golden("google_mlperf06_32k"), golden("fujitsu_86k")
    assert nvidia.rows[0]["lr"] == pytest.approx(40.7 / 726)  # MXNet's first num_update is 1, not 0
    assert tf.rows[2982]["lr"] > 1e-4 * 1.2  # TF's denominator T - Tw + 1: never reaches the end LR
    # ramp stops at 539/540
    assert fujitsu.rows[1349]["weight_decay"] == pytest.approx(6.5e-4 * 0.0025 * 539 / 540)


def test_ying_normalises_per_core_of_the_papers_machine():
    """1811.06992 ran 1024 TPU v3 chips = 2048 cores: configs/cloud/v3-2048.yaml num_cores 2048, train_batch_size
    32768; resnet_model.py (b13e6b6) normalises per core, so each BN statistic spans 32768 / 2048 images."""
    from tests.unit.recipe_helpers import recipe

    assert recipe("ying_tpu_32k").batch.bn_group == 32768 // 2048
