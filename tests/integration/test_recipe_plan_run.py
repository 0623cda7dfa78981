"""A real run follows its plan: the plan lines it prints are the card's, it evaluates after exactly the
planned steps (offset, padded epochs longer than a pass over the data, the final step), time-to-target
registers at the evaluated step in the source's epochs, and deviations reach the results."""

import json
import sys

import pytest
from helpers import make_demo_data, run

pytestmark = pytest.mark.slow
DEVIATION = "[{technique: 'BN span', published: '32 per GPU', ours: '16 (ghost BN)', why: 'toy scale'}]"


def test_run_evaluates_at_planned_steps_and_prints_the_card_plan(tmp_path):
    data = make_demo_data(tmp_path / "data", val_per_class=2)
    # 160 images, global batch 64: our loader gives 160 // 64 = 2 steps per pass; the "source" (2 MXNet
    # workers of 32, each padding its last batch) counted ceil(int(160 / 2) / 32) = 3 steps per epoch.
    plan_overrides = [
        "debug=toy",
        "trainer.max_steps=-1",
        "trainer.max_epochs=5",
        "epoch_length.mode=padded",
        "epoch_length.workers=2",
        "epoch_length.num_train_images=160",
        "evaluation.every_n_epochs=2",
        "evaluation.offset_epochs=1",
        f"deviations={DEVIATION}",
    ]
    out = tmp_path / "run"
    trained = run(
        [
            sys.executable,
            "-m",
            "lightning_lars.train",
            "recipe=demo",
            *plan_overrides,
            f"paths.data_dir={data}",
            f"hydra.run.dir={out}",
            "~logger",
            "model.arch=test_resnet",
            "callbacks.time_to_target.target_top1=1",
            "callbacks.time_to_target.stop_at_target=false",
            "trainer.limit_val_batches=1",
        ]
    )
    assert trained.returncode == 0, (trained.stdout + trained.stderr)[-3000:]
    card = run([sys.executable, "-m", "lightning_lars.recipe_card", "demo", *plan_overrides])
    assert card.returncode == 0, card.stderr[-2000:]

    lines = (trained.stdout + trained.stderr).splitlines()
    # the plan's one measured line follows the first step; a card cannot know it
    first_step = [line for line in lines if "[lightning-lars] plan: first optimizer step done" in line]
    assert len(first_step) == 1, lines[-40:]
    printed = [
        line.split("[lightning-lars] ", 1)[1]
        for line in lines
        if line not in first_step
        and ("[lightning-lars] plan:" in line or "[lightning-lars] deviation:" in line)
    ]
    carded = [
        line.strip() for line in card.stdout.splitlines() if line.strip().startswith(("plan:", "deviation:"))
    ]
    assert printed == carded and len(printed) == 4, (printed, carded)
    assert "3 steps/epoch (padded" in printed[1] and "15 steps = 5 epochs" in printed[1]

    record = json.loads((out / "results.json").read_text())
    assert record["steps"] == 15 and record["epochs"] == 5.0
    # MLPerf eval_offset 1, every 2 epochs: after epochs 2 and 4 (steps 6, 12), then the final step 15
    assert [(e["step"], e["epoch"]) for e in record["evals"]] == [(6, 2.0), (12, 4.0), (15, 5.0)]
    assert record["metrics"]["target/epochs_to_target"] == 2.0  # registered at the first evaluation
    assert record["metrics"]["target/time_to_target_s"] == record["evals"][0]["elapsed_s"]
    assert record["deviations"] == [
        {"technique": "BN span", "published": "32 per GPU", "ours": "16 (ghost BN)", "why": "toy scale"}
    ]
    assert "BN span: published 32 per GPU; ours 16 (ghost BN) (toy scale)" in trained.stdout
