"""results.json and the results table from a `RunRecord` alone: the report needs no trainer and no callback,
and every number it prints or writes is one the record holds."""

import json

from omegaconf import OmegaConf

from lightning_lars.report import results
from lightning_lars.report.record import HParamSamples, RunRecord, TargetRecord

CFG = OmegaConf.create(
    {
        "recipe_name": "demo",
        "seed": 3,
        "batch": {"global_size": 64},
        "published": {"top1": 75.9, "global_batch": 32768},
        "deviations": [],
    }
)


def schedule(step):
    return 0.1 * (step + 1)


def record() -> RunRecord:
    evals = ((1.0, 2, 40.0, 12.5), (2.0, 4, 55.0, 30.0))
    target = TargetRecord(
        target_top1=50.0,
        evals=evals,
        time_to_target_s=30.0,
        epochs_to_target=2.0,
        summary={"target/reached": 1.0, "target/time_to_target_s": 30.0},
    )
    hparams = HParamSamples(
        applied=((0, 0.0, schedule(0), 1e-4, 0.9), (2, 1.0, schedule(2), 1e-4, 0.9)),
        total_steps=4,
        lr_schedule=schedule,
    )
    return RunRecord(
        steps=4,
        world_size=2,
        accelerator="CPUAccelerator",
        hardware="2 x CPU (2 cores)",
        epochs=2.0,
        throughput={
            "perf/images_per_sec": 1500.0,
            "perf/data_wait_fraction": 0.25,
            "perf/num_images_counted": float("nan"),
        },
        hparams=hparams,
        target=target,
    )


def test_results_json_holds_the_records_numbers():
    metrics = {"val/top1": 0.55, "time/wall_s": 31.0, "val/loss": float("nan")}
    written = json.loads(json.dumps(results.results(CFG, metrics, record())))
    assert (written["steps"], written["world_size"], written["epochs"]) == (4, 2, 2.0)
    assert written["hardware"] == "2 x CPU (2 cores)" and written["published"]["top1"] == 75.9
    evals = [{"epoch": e, "step": s, "top1": t, "elapsed_s": w} for e, s, t, w in record().target.evals]
    assert written["evals"] == evals
    assert written["metrics"]["perf/images_per_sec"] == 1500.0 and written["metrics"]["target/reached"] == 1.0
    assert "val/loss" not in written["metrics"] and "perf/num_images_counted" not in written["metrics"]  # NaN


def test_table_rows_and_lr_series_read_the_record():
    metrics = {"val/top1": 0.55, "time/wall_s": 31.0}
    rows = {name: (ours, theirs) for name, ours, theirs in results.summary_rows(CFG, metrics, record())}
    assert rows["images/s (train, all devices)"][0] == f"{1500.0:,.0f}"
    assert rows["data wait (share of train time)"][0] == f"{100 * 0.25:.1f} %"
    assert rows["hardware"][0] == "2 x CPUAccelerator" and rows["optimizer steps"][0] == "4"
    assert rows["time to 50 % top-1"][0] == "30.0 s, 2.00 epochs"
    series = results.lr_series(record())
    assert [(s, v) for s, v, kind in series if kind == "planned"] == [(s, schedule(s)) for s in range(4)]
    assert [(s, v) for s, v, kind in series if kind == "applied"] == [(0, schedule(0)), (2, schedule(2))]
    assert results.lr_series(RunRecord()) == []  # no samples recorded: no series, and the table still prints
    assert results.summary_rows(CFG, {"time/wall_s": 1.0}, RunRecord())
