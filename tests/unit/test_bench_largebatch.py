"""The pure helpers of benchmarks/bench_largebatch.py: LR scaling rules, the seeds' mean/std, each row's config."""

import importlib.util
import math
import sys
from pathlib import Path

import numpy as np
import pytest
from hydra.utils import instantiate

from lightning_lars.config import compose as config

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_largebatch.py"
spec = importlib.util.spec_from_file_location("bench_largebatch", BENCH)
bench = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = bench  # dataclasses look their module up there
spec.loader.exec_module(bench)


@pytest.mark.parametrize(
    ("lr", "source_batch", "batch", "rule", "expected"),
    [
        (0.1, 256, 8192, "linear", 3.2),  # Goyal et al. sec. 5.1: "lr = 0.1 * kn/256 ... 3.2" at kn = 8k
        (0.1, 256, 64, "linear", 0.025),
        (0.04, 32768, 512, "sqrt", 0.005),  # sqrt(512 / 32768) = 1/8
        (0.005, 512, 32768, "sqrt", 0.04),  # and back
    ],
)
def test_scaled_lr_follows_the_papers_rules(lr, source_batch, batch, rule, expected):
    assert bench.scaled_lr(lr, source_batch, batch, rule) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("bad", [(0.1, 256, 512, "cubic"), (0.0, 256, 512, "linear"), (0.1, 0, 512, "sqrt")])
def test_scaled_lr_refuses_bad_input(bad):
    with pytest.raises(ValueError):
        bench.scaled_lr(*bad)


def test_summary_matches_numpy_and_leaves_out_diverged_seeds():
    top1 = [81.5, 79.25, math.nan, 83.0]
    mean, std, n = bench.summarize(top1)
    finite = np.array([81.5, 79.25, 83.0])
    assert n == 3
    assert mean == pytest.approx(finite.mean()) and std == pytest.approx(finite.std(ddof=1))
    assert bench.summarize([math.nan, math.nan])[2] == 0
    assert "2 diverged" in bench.table([(bench.contenders(9)[0], 0.025, [50.0, math.nan, math.nan], 1.0)])


@pytest.mark.parametrize("row", range(6))
def test_every_row_composes_to_an_optimizer_that_takes_its_keys(row, tmp_path):
    contender = bench.contenders(9)[row]
    cfg = bench.compose_run(contender, contender.lr, 0, str(tmp_path), str(tmp_path), None)
    assert cfg.optimizer._target_.rsplit(".", 1)[-1].lower() == {"sgd": "sgd"}.get(
        contender.optimizer, contender.optimizer
    )
    assert cfg.batch.global_size == contender.batch and cfg.scheduler.base_lr == pytest.approx(contender.lr)
    config.check_partial("optimizer", instantiate(cfg.optimizer))  # a key the optimizer rejects fails here
