"""A run assembled from its config and its one plan, in the order `build` follows: the callbacks of the config ->
the devices Lightning will use and the plan (`recipe_plan.plan_run`: the entry point's, made before torch
loaded by `lightning_lars.train.check_job`, its batch split here only for ``devices: auto``; made here once where
none is handed in) -> the datamodule with the per-device batch (its train-set size held to the plan's) -> the
logger -> the trainer, built with the plan's accumulation, steps, epoch length and evaluation steps -> the
optimizer -> the model with the plan's LR schedule (grown, where the batch grows); the plan lines are printed
before `run` fits (lightning-hydra-template's ``train()``, reordered: the trainer needs the plan).
"""

from __future__ import annotations

import signal
import time

import lightning as L
from hydra.utils import instantiate
from lightning.pytorch.utilities import rank_zero_info
from omegaconf import DictConfig, OmegaConf

import lightning_lars.models  # noqa: F401  (timm names alexnet_bn, resnet50_v1; the ${at_least_model_min:} resolver)
from lightning_lars.callbacks.monitors.first_step import FirstStepTime
from lightning_lars.callbacks.monitors.run_history import RunHistory
from lightning_lars.callbacks.techniques.batch_norm import BatchNormGroups
from lightning_lars.callbacks.techniques.evaluation import EvaluationSchedule
from lightning_lars.callbacks.techniques.schedule import ScheduleCallback
from lightning_lars.config import schema
from lightning_lars.core.errors import UserError
from lightning_lars.recipe.planned_run import RecipePlan
from lightning_lars.report import results
from lightning_lars.report.provenance import provenance
from lightning_lars.report.wandb_logger import close_runs
from lightning_lars.runtime import config_change, preemption, resume, run_folder
from lightning_lars.runtime.checkpoint_io import AtomicCheckpointIO
from lightning_lars.runtime.checkpointing import ResumeState
from lightning_lars.runtime.signal_checkpoint import SignalCheckpoint
from lightning_lars.training import target_checks
from lightning_lars.training.recipe_plan import plan_run
from lightning_lars.training.run_record import run_record


def run_callbacks(cfg: DictConfig, started: float) -> list:
    """The config's callbacks and the ones every run needs: exact resume (RNG + W&B id in checkpoints, a save on
    a signal), the schedule, the run's history and its time to the first step."""
    callbacks = [instantiate(c) for c in cfg.callbacks.values()]
    # preemption, Ctrl-C and SIGTERM: checkpoint at the next step boundary (a second Ctrl-C aborts); one
    # SignalCheckpoint of the config (+callbacks.preemption.check_every_s=...) replaces the default one
    configured = any(isinstance(c, SignalCheckpoint) for c in callbacks)
    return [
        *callbacks,
        ScheduleCallback(),
        ResumeState(),
        *([] if configured else [SignalCheckpoint()]),
        RunHistory(),
        FirstStepTime(started),  # the time to the first step, as a plan line
    ]


def build(
    cfg: DictConfig,
    ckpt_path: str | None = None,
    started: float | None = None,
    plan: RecipePlan | None = None,
):
    """Every part, in the module docstring's order, from one plan; returns (trainer, module, datamodule, batch
    plan). ``ckpt_path``: the run being resumed; ``started``: ``time.perf_counter()`` when the command started;
    ``plan``: the entry point's plan (`plan_run` takes it), else made here once."""
    started = time.perf_counter() if started is None else started
    target_checks.check(cfg)  # model name, accelerator, optimizer: before a W&B run is opened
    callbacks = run_callbacks(cfg, started)
    datamodule, plan = plan_run(cfg, callbacks, plan)
    trainer, module = build_planned(cfg, plan, callbacks, ckpt_path)
    report_plan(cfg, plan, trainer, started)
    return trainer, module, datamodule, plan.batch_plan


def build_planned(cfg: DictConfig, plan: RecipePlan, callbacks: list, ckpt_path: str | None = None):
    """The logger, the trainer with ``plan``'s settings, the optimizer and the model with ``plan``'s LR schedule;
    returns (trainer, module)."""
    strategy = instantiate(schema.plain(cfg.strategy)) if "_target_" in cfg.strategy else cfg.strategy.name
    plugins = [AtomicCheckpointIO(), *preemption.cluster_plugins()]
    # Lightning's model summary (a table of parameter counts) printed into every run's log: off with Lightning's
    # own switch, unless the command line asks for it (trainer.enable_model_summary=true)
    summary = {} if "enable_model_summary" in cfg.trainer else {"enable_model_summary": False}
    batch = plan.batch_plan
    planned_callbacks = [
        BatchNormGroups(batch),  # BN statistics over the recipe's span
        # evaluation runs after the plan's steps, not at Lightning's epoch ends
        EvaluationSchedule(plan.eval_steps, plan.epoch_at, plan.planned_steps if plan.stops_early else None),
    ]
    # our loaders drop the last partial batch; a source's epoch shorter than a pass over the data (mode fixed)
    # ends Lightning's epoch with it
    loader_steps = plan.num_train_images // batch.global_size
    epoch = {}
    if plan.steps_per_epoch < loader_steps and cfg.trainer.get("limit_train_batches", 1.0) == 1.0:
        epoch = {"limit_train_batches": plan.steps_per_epoch * batch.accumulation}
    # The run ends at the planned step; Lightning's epochs are passes over the loader, which may be shorter
    # than the source's padded epoch, so they do not bound the run. Lightning's Trainer(...) judges the rest.
    trainer = instantiate(
        cfg.trainer,
        strategy=strategy,
        callbacks=[*callbacks, *planned_callbacks],
        logger=False,  # set below, once Lightning took the rest
        plugins=plugins,
        accumulate_grad_batches=batch.accumulation,
        max_steps=plan.total_steps,
        max_epochs=-1,
        check_val_every_n_epoch=None,
        val_check_interval=1,
        **epoch,
        **summary,
    )
    if trainer.num_devices * trainer.num_nodes != batch.world_size:  # planned_world and Lightning disagree
        raise UserError(
            f"the plan is for {batch.world_size} device(s), Lightning's trainer uses {trainer.num_devices} x"
            f" {trainer.num_nodes} node(s): set trainer.devices={trainer.num_devices}"
        )
    # W&B starts only once Lightning's Trainer(...) took its arguments: its refusal is one line, and no W&B folder
    # is made. The same W&B run when resuming; ~logger: no logging at all.
    if cfg.get("logger") and "_target_" in cfg.logger:
        trainer.loggers = [instantiate(cfg.logger, **resume.logger_kwargs(cfg, ckpt_path))]
    optimizer = instantiate(schema.plain(cfg.optimizer))  # its keys and types: checked at composition
    # the schedule goes in after Hydra: instantiate would turn a dataclass argument into a DictConfig
    # plain + "all": the hyperparameters every checkpoint saves (model_kwargs) are dicts and text, not
    # OmegaConf's containers or our Enums, which torch.load(weights_only=True) refuses to rebuild
    model = instantiate(schema.plain(cfg.model), optimizer=optimizer, _partial_=True, _convert_="all")
    return trainer, model(lr_schedule=plan.lr_schedule)


def report_plan(cfg: DictConfig, plan: RecipePlan, trainer, started: float) -> None:
    """The recipe's claim, the plan lines, the start-up time, and the config, plan and provenance as the logger's
    hyperparameters: once every part is built (a refused part's one line comes alone)."""
    rank_zero_info(f"[lightning-lars] recipe {cfg.recipe_name}: {cfg.published.get('claim', '')}")
    planned_images = cfg.epoch_length.num_train_images
    if planned_images != plan.num_train_images:
        rank_zero_info(
            f"[lightning-lars] the data has {plan.num_train_images} train images, the recipe was planned"
            f" at {planned_images} (epoch_length.num_train_images): steps follow the data"
        )
    for line in plan.describe():
        rank_zero_info(f"[lightning-lars] {line}")
    rank_zero_info(
        f"[lightning-lars] start-up {time.perf_counter() - started:.1f} s (command line to first build)"
    )
    if trainer.logger is not None:
        trainer.logger.log_hyperparams(
            {
                # the schema's Enum as text
                "config": OmegaConf.to_container(cfg, resolve=True, enum_to_str=True),
                "plan": plan.summary(),
                "provenance": provenance(),
            }
        )


def run(cfg: DictConfig, started: float | None = None, plan: RecipePlan | None = None) -> dict[str, float]:
    """Fit ``cfg`` (by ``plan``, the entry point's, where given) while holding its run folder (and a resumed
    run's folder) against a second live run."""
    with run_folder.holding(cfg.paths.output_dir):
        return _run(cfg, started, plan)


def _run(cfg: DictConfig, started: float | None, plan: RecipePlan | None) -> dict[str, float]:
    L.seed_everything(cfg.seed, workers=True, verbose=False)
    ckpt_path = resume.resolve_ckpt_path(cfg, plan.total_steps if plan is not None else None)
    resume.keep_checkpoints_together(cfg, ckpt_path)  # a resumed run saves beside the checkpoint it resumed
    resumed = resume.run_folder_of(cfg, ckpt_path) if ckpt_path is not None else None
    if resumed is not None:  # where it now writes: no second run resumes that folder while this one lives
        run_folder.hold(resumed)
    # what a later `run.ckpt_path=last` compares, $LARS_DATA_DIR resolved
    config_change.write_resolved_config(cfg)
    trainer, module, datamodule, _batch = build(cfg, ckpt_path, started, plan)
    try:
        # weights_only: Lightning's None leaves it to torch and TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD; data only here
        trainer.fit(module, datamodule=datamodule, ckpt_path=ckpt_path, weights_only=True)
    except SystemExit:  # Lightning's exit after Ctrl-C: ours, the second Ctrl-C, says what it lost
        signals = [c for c in trainer.callbacks if isinstance(c, SignalCheckpoint) and c.aborted]
        if not signals:
            raise
        raise preemption.Preempted(
            signals[0].abort_message(trainer), exit_status=128 + signal.SIGINT
        ) from None
    if cfg.run.validate_at_end and not trainer.interrupted:
        trainer.validate(module, datamodule=datamodule, verbose=False)
    metrics = {k: float(v) for k, v in trainer.callback_metrics.items()}
    # the whole run's, earlier attempts included (ResumeState's clock, from Lightning's fit start on)
    metrics["time/wall_s"] = next(c for c in trainer.callbacks if isinstance(c, ResumeState)).run_wall_s()
    if trainer.is_global_zero:
        if trainer.logger is not None:
            trainer.logger.log_metrics({f"final/{k}": v for k, v in metrics.items()})
        # table, results.json, report.png, W&B summary table and plots: from the run's numbers as plain data
        results.finish(cfg, metrics, run_record(trainer), trainer.loggers)
        close_runs(trainer.loggers)
    return metrics
