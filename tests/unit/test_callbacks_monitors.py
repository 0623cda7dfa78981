"""HParamMonitor and TrustRatioMonitor inside a real fit: what they log is what the optimizer used."""

import copy
import functools
import itertools

import pytest
from callback_harness import NUM_CLASSES, classifier, images, loader, trainer
from lightning.pytorch.loggers import CSVLogger
from lightning_lars.callbacks.monitors.hparam_monitor import HParamMonitor, group_label
from lightning_lars.callbacks.monitors.trust_ratio import TrustRatioMonitor
from lightning_lars.callbacks.techniques.schedule import ScheduleCallback

from lightning_lars.optim.neumann import Neumann
from lightning_lars.training.module import ImageClassifier


def test_hparam_monitor_records_the_lr_the_schedule_applied(tmp_path):
    def schedule(step):  # a distinct LR at every step
        return 0.5 / (step + 1)

    module = classifier("lars", lr_schedule=schedule, weight_decay=5e-4)
    monitor = HParamMonitor(every_n_steps=2)
    logger = CSVLogger(tmp_path)
    fit = trainer([monitor, ScheduleCallback()], tmp_path, max_steps=5, logger=logger, limit_val_batches=0)
    fit.fit(module, loader(images(48)))
    assert [step for step, *_ in monitor.history] == [0, 2, 4]
    assert [lr for _, _, lr, *_ in monitor.history] == pytest.approx([schedule(0), schedule(2), schedule(4)])
    # 6 batches per epoch; step s is taken during batch s, when s batches are complete
    assert [epoch for _, epoch, *_ in monitor.history] == pytest.approx([0, 2 / 6, 4 / 6])
    logger.save()
    header = (
        (tmp_path / "lightning_logs" / "version_0" / "metrics.csv").read_text().splitlines()[0].split(",")
    )
    groups = fit.optimizers[0].param_groups
    assert [group_label(i, g) for i, g in enumerate(groups)] == ["group0_adapted", "group1_excluded"]
    for key in (
        "hparams/lr/group0_adapted",
        "hparams/momentum/group1_excluded",
        "hparams/weight_decay/group0_adapted",
    ):
        assert key in header


def test_hparam_monitor_logs_neumanns_momentum_of_each_step(tmp_path):
    """Neumann's momentum lives in the optimizer (mu(t) of its own step count), not in a param group."""
    module = ImageClassifier(
        "test_resnet",
        NUM_CLASSES,
        lr_schedule=lambda step: 0.05,
        optimizer=functools.partial(Neumann, sgd_steps=1, reset_steps=0, momentum_time_unit=1),
    )
    monitor = HParamMonitor(every_n_steps=1)
    logger = CSVLogger(tmp_path)
    trainer([monitor, ScheduleCallback()], tmp_path, max_steps=5, logger=logger, limit_val_batches=0).fit(
        module, loader(images(48))
    )
    # Algorithm 2: step 0 is the SGD burn-in and step 1 the reset (t = 1): no momentum moves a weight; then
    # Table 1's mu(t) = 1 - 1 / (1 + t) within [0.5, 0.9], t = 2, 3, 4 counted in steps
    expected = [0.0, 0.0, *(min(0.9, max(0.5, 1 - 1 / (1 + t))) for t in (2, 3, 4))]
    assert [momentum for *_, momentum in monitor.history] == pytest.approx(expected)
    logger.save()
    rows = (tmp_path / "lightning_logs" / "version_0" / "metrics.csv").read_text().splitlines()
    column = rows[0].split(",").index("hparams/momentum/group0_adapted")
    assert [float(row.split(",")[column]) for row in rows[1:] if row.split(",")[column]] == pytest.approx(
        expected
    )


def test_hparam_monitor_history_stays_bounded_and_even():
    monitor = HParamMonitor(every_n_steps=1, max_history=8)
    for step in range(40):
        if step % monitor._history_stride == 0:
            monitor._record(step, 0.0, 1.0)
    assert len(monitor.history) <= 8
    steps = [s for s, *_ in monitor.history]
    assert steps[0] == 0 and len({b - a for a, b in itertools.pairwise(steps)}) == 1  # evenly spaced


def test_trust_ratio_monitor_maps_norms_to_layer_names(tmp_path):
    module = classifier("lars")
    initial = copy.deepcopy(module.model)
    monitor = TrustRatioMonitor(every_n_steps=1)
    trainer([monitor], tmp_path, max_steps=1, limit_val_batches=0).fit(module, loader(images(16)))
    adapted = {
        n: p for n, p in initial.named_parameters() if p.ndim >= 2
    }  # the ndim<=1 rule excludes the rest
    assert monitor.last["names"] == list(adapted)
    # Step 0 measured the weights before the update: the initial weights.
    expected = [float(p.norm()) for p in adapted.values()]
    assert monitor.last["w_norm"] == pytest.approx(expected, rel=1e-5)
    assert any(g > 0 for g in monitor.last["g_norm"])  # (zero-init last BN: some gradients are 0 at step 0)
    eta, wd = 0.001, 1e-4
    ratio = [
        eta * w / (g + wd * w) if w > 0 and g > 0 else 1.0  # LARS: ratio 1 where a norm is 0
        for w, g in zip(monitor.last["w_norm"], monitor.last["g_norm"])
    ]
    assert monitor.last["trust_ratio"] == pytest.approx(ratio, rel=1e-5)


def test_trust_ratio_monitor_tracks_only_sampled_steps(tmp_path):
    module = classifier("lars")
    monitor = TrustRatioMonitor(every_n_steps=3)
    fit = trainer([monitor], tmp_path, max_steps=7, limit_val_batches=0)
    fit.fit(module, loader(images(64)))
    assert [step for step, _ in monitor.history] == [0, 3, 6] == [step for step, _ in monitor.layer_history]
    low, median, high = (monitor.history[-1][1][q] for q in ("min", "median", "max"))
    assert 0 < low <= median <= high
    optimizer = fit.optimizers[0]
    # steps between samples pay nothing
    assert optimizer.track_stats is False and optimizer.last_stats is None


def test_trust_ratio_monitor_is_silent_for_sgd(tmp_path):
    monitor = TrustRatioMonitor(every_n_steps=1)
    trainer([monitor], tmp_path, max_steps=2, limit_val_batches=0).fit(classifier("sgd"), loader(images(16)))
    assert monitor.history == [] and monitor.last is None


def test_monitors_reject_a_zero_interval():
    with pytest.raises(ValueError):
        HParamMonitor(every_n_steps=0)
    with pytest.raises(ValueError):
        TrustRatioMonitor(every_n_steps=0)
