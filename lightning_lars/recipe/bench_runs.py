"""The arms of ``benchmarks/bench_largebatch.py`` and the override list of one run: a recipe with only sizes changed
(the batch, the epochs, every schedule mark scaled by the ratio of epochs), the LR moved to the large batch by a
rule (``shrink.lr_overrides``) and, for a tuning trial, scaled and evaluated on held-out training images; the
data set read from a folder made by ``make prepare``. Composes nothing itself: the bench composes the list.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from lightning_lars.recipe.shrink import lr_overrides, scaled_marks
from lightning_lars.schedules.scaling import scale_lr

# Sizes, our choice for "an arm and seed in minutes on 2 shared CPU cores" (README, Runs of ours):
EPOCHS = 8
SMALL_BATCH = 64  # Goyal's baseline is 256 on 1.28 M images; 64 keeps ~80 steps/epoch on 5,000 images
RESOLUTION = 32  # px, train and eval
# timm's resnet10t with 1/4 of its widths: 0.3 M parameters instead of 5 M, the same blocks, BN and residuals.
WIDTHS = {"quarter": ["+model.model_kwargs={channels:[16,32,64,128],stem_width:16}"], "full": []}
HOLDOUT_RULE = (
    "np.random.default_rng(seed).permutation(len(train.beton)): the first round(share * N) held out"
)
MLPERF_ARM = "lars_mlperf"  # the one arm MLCommons' reference points give LRs for (LARS, ResNet-50)


@dataclass(frozen=True)
class Arm:
    name: str  # the table's and runs.jsonl's label
    recipe: str
    large: bool = True  # at the large batch (ratio x N), else at SMALL_BATCH
    lr_rule: str | None = None  # the one LR rule this arm trains with; None: any the bench is given


ARMS = (
    Arm("sgd_small", "goyal_8k", large=False),
    Arm("goyal_sgd", "goyal_8k"),
    # SGD at the large batch on the square-root rule the layer-wise arms use: what they add beyond the LR rule
    Arm("sgd_sqrt", "goyal_8k", lr_rule="sqrt"),
    Arm("lars_you", "resnet50_32k"),
    Arm("lars_mlperf", "nvidia_mlperf10_3264"),
    Arm("lamb", "lamb_32k"),
    Arm("neumann", "neumann_32k"),
    Arm("nlcg", "nlcg_65k"),
)


def run_overrides(
    arm: Arm, recipe, batch: int, epochs: int, data: Path, num_classes: int, seed: int, out, px: int,
    setup: dict | None = None,
):  # fmt: skip
    """The full override list of one run: sizes, the data set, the device, and no logger or extra callbacks.
    ``setup``: width, lr_rule, ratio, device, workers (the bench's options; today's set-up when left out)."""
    setup = {"width": "quarter", "lr_rule": "linear", "device": "cpu", "workers": 1} | (setup or {})
    share, holdout_seed = setup.get("holdout", 0.0), setup.get("holdout_seed", 0)
    train = trained_images(data, share)
    spe = train // batch
    marks = scaled_marks(recipe, epochs, spe)
    rule = arm.lr_rule or setup["lr_rule"]
    lr = lr_overrides(recipe, batch, setup.get("ratio", 0.1), epochs, rule) if arm.large else []
    scale = setup.get("lr_scale", 1.0)
    if scale != 1.0:  # a tuning trial: the rule's LR (at the batch it names) times the scale
        given = dict(o.split("=", 1) for o in lr if o.startswith("scheduler.base_lr="))
        base_lr = float(given.get("scheduler.base_lr", recipe.scheduler.base_lr))
        lr = [o for o in lr if not o.startswith("scheduler.base_lr=")] + [
            f"scheduler.base_lr={base_lr * scale:.6g}"
        ]
    held = [f"+data.holdout={share:g}", f"+data.holdout_seed={holdout_seed}"] if share else []
    if not arm.large or any(o.startswith("scheduler.warmup_epochs=") for o in lr):
        marks = [m for m in marks if not m.startswith("scheduler.warmup_epochs=")]
    if not arm.large:  # Goyal sec. 5.1: the small-batch baseline has no warmup
        marks += ["scheduler.warmup_epochs=0"]
    accelerator = "gpu" if setup["device"] == "cuda" else "cpu"
    return [
        f"recipe={arm.recipe}",
        f"seed={seed}",
        f"batch.global_size={batch}",
        f"batch.max_per_device={batch}",
        "batch.bn_group=null",  # BN over the whole batch: one device here
        *marks,
        *lr,
        "epoch_length.mode=drop_last",
        "epoch_length.workers=null",
        f"epoch_length.num_train_images={train}",
        # the top-1 curve: one point per epoch
        *"evaluation.every_n_epochs=1 evaluation.every_n_steps=null evaluation.offset_epochs=0".split(),
        "evaluation.offset_steps=0",
        f"data.train_path={data / 'train.beton'}",
        f"data.val_path={data / 'val.beton'}",
        f"data.num_classes={num_classes}",
        f"data.resolution={px}",
        f"data.val_resolution={px}",
        f"data.num_workers={setup['workers']}",  # measured: 1 loader thread beats 2 on 2 shared cores
        *held,
        "model.arch=resnet10t",
        *WIDTHS[setup["width"]],
        "model.channels_last=false",
        f"trainer.accelerator={accelerator}",
        *"strategy=auto trainer.devices=1 trainer.precision=32-true".split(),
        f"paths.log_dir={out}",
        f"paths.output_dir={out}/run",
        "~logger",
        *(
            f"~callbacks.{c}"
            for c in "checkpoint progress trust_ratio hparams throughput time_to_target mlperf_log".split()
        ),
        *(f"+trainer.enable_{c}=false" for c in ("progress_bar", "model_summary", "checkpointing")),
    ]


def lr_at_batch(overrides: list[str], recipe, batch: int) -> float:
    """The peak LR the run trains with: the (possibly overridden) base LR moved to ``batch`` by scale_lr."""
    given = dict(
        o.split("=", 1) for o in overrides if o.startswith(("scheduler.base_lr=", "scheduler.base_batch="))
    )
    base_lr = float(given.get("scheduler.base_lr", recipe.scheduler.base_lr))
    return scale_lr(base_lr, int(given.get("scheduler.base_batch", recipe.scheduler.base_batch)), batch)


def portable(overrides: list[str], data: Path, out: Path) -> list[str]:
    """The overrides as a row keeps them: the machine's data and log folders become DATA and LOGS."""
    return [o.replace(str(out), "LOGS").replace(str(data), "DATA") for o in overrides]


def trained_images(data: Path, holdout: float = 0.0) -> int:
    """Training images a run steps through: train.beton's, less the held-out share (``holdout.holdout_split``)."""
    total = manifest_images(data)["train"]
    return total - round(holdout * total) if holdout else total


def manifest_images(data: Path) -> dict[str, int]:
    manifest = json.loads((data / "manifest.json").read_text())
    return {s: v["num_images"] for s, v in manifest["splits"].items()} | {"classes": manifest["num_classes"]}
