"""report.png as a person reads it, drawn from a real fit's `RunRecord` (its callbacks' numbers as plain
data): LR, weight decay and momentum planned against applied; the trust ratio of every adapted layer at every
sample, not only step 0 (where layers behind a zero-initialised BN read 1.0); val top-1 with the target line;
loss; images/s. Read from the figure's own lines and image, so a panel that silently lost its data fails here,
not only in a person's eyes."""

import matplotlib.pyplot as plt
import numpy as np
import pytest
from callback_harness import classifier, images, loader, trainer
from lightning_lars.callbacks.monitors.hparam_monitor import HParamMonitor
from lightning_lars.callbacks.monitors.run_history import RunHistory
from lightning_lars.callbacks.monitors.time_to_target import TimeToTarget
from lightning_lars.callbacks.monitors.trust_ratio import TrustRatioMonitor
from lightning_lars.callbacks.techniques.schedule import ScheduleCallback
from omegaconf import OmegaConf
from PIL import Image

from lightning_lars.report import plot
from lightning_lars.report.record import RunRecord
from lightning_lars.training.run_record import run_record

STEPS_PER_EPOCH, EPOCHS = 4, 2  # 32 images in batches of 8
CFG = OmegaConf.create(
    {"recipe_name": "demo", "seed": 0, "batch": {"global_size": 8}, "published": {"top1": "-"}}
)


def schedule(step):  # a ramp: every applied point must sit on the planned line at its own step
    return 0.5 * (step + 1) / (STEPS_PER_EPOCH * EPOCHS)


def draw(monkeypatch, record, out_dir):
    """``write_report_png``'s figure, kept open to be read (it closes the figure after saving). Matplotlib 3.8's
    first switch to the Agg backend also calls ``plt.close("all")``: only Figures are ours."""
    closed = []
    monkeypatch.setattr(plt, "close", closed.append)
    path = plot.write_report_png(CFG, record, out_dir)
    (figure,) = [f for f in closed if isinstance(f, plt.Figure)]
    panels = {ax.get_title().split(" (")[0]: ax for ax in figure.axes if ax.get_title()}
    return path, figure, panels


def lines(ax) -> dict:
    return {line.get_label(): (list(line.get_xdata()), list(line.get_ydata())) for line in ax.get_lines()}


def test_the_six_panels_hold_what_the_run_did(tmp_path, monkeypatch):
    callbacks = [
        HParamMonitor(every_n_steps=1),
        TrustRatioMonitor(every_n_steps=2),
        RunHistory(),
        ScheduleCallback(),
        TimeToTarget(target_top1=60.0, stop_at_target=False),
    ]
    fit = trainer(callbacks, tmp_path, max_epochs=EPOCHS, limit_val_batches=1)
    fit.fit(
        classifier("lars", lr_schedule=schedule, weight_decay=1e-4),
        loader(images(32)),
        loader(images(8, seed=1)),
    )
    path, figure, panels = draw(monkeypatch, run_record(fit), tmp_path)
    try:
        with Image.open(path) as picture:
            assert picture.format == "PNG" and picture.size == (1440, 810)
        steps = list(range(STEPS_PER_EPOCH * EPOCHS))

        lr = lines(panels["learning rate, group 0"])
        assert lr["planned (schedule)"][0] == steps
        assert lr["applied (optimizer)"][0] == steps
        assert lr["applied (optimizer)"][1] == pytest.approx([schedule(s) for s in steps])

        legend = panels["weight decay and momentum, group 0"].get_legend()
        assert [t.get_text() for t in legend.get_texts()] == [
            "weight decay planned",
            "weight decay applied",
            "momentum planned",
            "momentum applied",
        ]
        assert lines(panels["weight decay and momentum, group 0"])["weight decay applied"][1] == [1e-4] * len(
            steps
        )

        trust = panels["trust ratio per layer"]
        (image,) = trust.images
        shown = np.asarray(image.get_array())  # log10 trust ratio: layers x samples (every 2nd step)
        adapted = [p for p in fit.lightning_module.parameters() if p.ndim >= 2]
        assert shown.shape == (len(adapted), STEPS_PER_EPOCH * EPOCHS // 2)
        assert trust.get_xticklabels()[0].get_text() == "0"  # steps on the x axis, from the first
        at_step_0 = np.isclose(shown[:, 0], 0.0)  # ratio 1.0: no gradient yet behind a zero-initialised BN
        assert at_step_0.any() and not np.isclose(shown[at_step_0, -1], 0.0).all()  # ...which later moves

        top1 = lines(panels["val top-1 vs epoch"])
        assert top1["val top-1"][0] == pytest.approx([1.0, 2.0])
        assert top1["target 60 %"][1] == [60.0, 60.0]
        loss = lines(panels["loss vs epoch"])
        assert loss["train (epoch mean)"][0] == pytest.approx([1.0, 2.0]) == loss["val"][0]
        (throughput,) = panels["training throughput"].get_lines()
        assert list(throughput.get_xdata()) == pytest.approx([1.0, 2.0]) and min(throughput.get_ydata()) > 0
    finally:
        plt.close(figure)


def test_a_panel_without_data_says_why(tmp_path, monkeypatch):
    _, figure, panels = draw(monkeypatch, RunRecord(), tmp_path)  # a run whose monitors were all left out
    try:
        assert not panels  # an empty panel has no title: none pretends to show data
        texts = [" ".join(t.get_text() for t in ax.texts) for ax in figure.axes]
        assert "no LR samples (HParamMonitor off)" in texts
        assert "no trust ratios (not LARS/LAMB, or TrustRatioMonitor off)" in texts
        assert (
            texts.count("no finished training epoch yet") == 1
            and "no evaluation during training yet" in texts
        )
    finally:
        plt.close(figure)
