"""Lightning's ``Trainer`` keyword arguments and the values each accepts, as a table: read without importing
Lightning (about 5 s on 2 cores), so ``trainer.max_steps=1`` composes without a ``+`` and ``trainer.max_step=1``
or ``trainer.max_epochs=abc`` is a one-line error in about a second (`lightning_lars.config.trainer_arguments`).

A table rather than a typed ``TrainerConfig`` schema: Lightning's annotations are unions (``devices``: int, str
or a list; ``limit_val_batches``: int or float; ``deterministic``: bool or "warn") that OmegaConf 2.3 cannot type,
and a ``float`` field would print ``limit_val_batches: 1`` as ``1.0`` in ``--cfg job``.
tests/unit/test_trainer_arguments.py
holds the table equal to ``inspect.signature(lightning.pytorch.Trainer)`` of the installed Lightning.

Each entry: the Python types and literal values the argument's annotation names (``None``: it may be null), or
`ANYTHING` where the annotation names a class of Lightning's or a container (checked by the Trainer itself).
"""

from __future__ import annotations

ANYTHING = "anything"

TRAINER_ARGUMENTS: dict[str, tuple | str] = {
    "accelerator": ANYTHING,
    "strategy": ANYTHING,
    "devices": ANYTHING,
    "num_nodes": (int,),
    "precision": (
        64,
        32,
        16,
        "transformer-engine",
        "transformer-engine-float16",
        "16-true",
        "16-mixed",
        "bf16-true",
        "bf16-mixed",
        "32-true",
        "64-true",
        "64",
        "32",
        "16",
        "bf16",
        None,
    ),
    "logger": ANYTHING,
    "callbacks": ANYTHING,
    "fast_dev_run": (int, bool),
    "max_epochs": (int, None),
    "min_epochs": (int, None),
    "max_steps": (int,),
    "min_steps": (int, None),
    "max_time": ANYTHING,
    "limit_train_batches": (float, int, None),
    "limit_val_batches": (float, int, None),
    "limit_test_batches": (float, int, None),
    "limit_predict_batches": (float, int, None),
    "overfit_batches": (int, float),
    "val_check_interval": ANYTHING,
    "check_val_every_n_epoch": (int, None),
    "num_sanity_val_steps": (int, None),
    "log_every_n_steps": (int, None),
    "enable_checkpointing": (bool, None),
    "enable_progress_bar": (bool, None),
    "enable_model_summary": (bool, None),
    "accumulate_grad_batches": (int,),
    "gradient_clip_val": (float, int, None),
    "gradient_clip_algorithm": (str, None),
    "deterministic": (bool, "warn", None),
    "benchmark": (bool, None),
    "inference_mode": (bool,),
    "use_distributed_sampler": (bool,),
    "profiler": ANYTHING,
    "detect_anomaly": (bool,),
    "barebones": (bool,),
    "plugins": ANYTHING,
    "sync_batchnorm": (bool,),
    "reload_dataloaders_every_n_epochs": (int,),
    "default_root_dir": ANYTHING,
    "enable_autolog_hparams": (bool,),
    "model_registry": (str, None),
}
TRAINER_TARGET = "lightning.pytorch.Trainer"
