"""The one entry point: ``python -m lightning_lars.train recipe=NAME key=value ...``.

Reads like lightning-hydra-template's ``train()``: datamodule -> model -> callbacks -> logger -> trainer ->
fit, with the batch plan and the LR scaling made explicit before anything trains.
"""

from __future__ import annotations

import logging
import sys
import time
import warnings

STARTED = time.perf_counter()  # before the heavy imports: the plan line reports the start-up time

import hydra
from hydra.errors import InstantiationException
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from lightning_lars import config, preflight
from lightning_lars.errors import UserError

# torch, Lightning, timm and FFCV take ~10 s to import on 2 cores: `main` checks the command line first, and
# the stack is imported by the functions that use it, so a mistake is reported in about a second.

# Lightning advertises its hosted logger at every start; in SLURM logs it reads like a warning. Our
# val_check_interval=1 only lets EvaluationSchedule choose the steps: "validation will run after every batch" is untrue.
NOISE = ("litlogger", "`Trainer(val_check_interval=1)` was configured")
logging.getLogger("lightning.pytorch.utilities.rank_zero").addFilter(
    lambda r: not any(text in r.getMessage() for text in NOISE))
# Lightning 2.6 calls a torch pytree API that torch 2.14 deprecates, once per run: not the user's to fix.
warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\)")


def build(cfg: DictConfig, ckpt_path: str | None = None):
    """Instantiate every part; returns (trainer, module, datamodule, plan). ``ckpt_path``: the run being resumed."""
    from lightning.pytorch.utilities import rank_zero_info

    from lightning_lars import preemption, resume, target_checks
    from lightning_lars.callbacks.checkpointing import AtomicCheckpointIO, ResumeState, SignalCheckpoint
    from lightning_lars.callbacks.first_step import FirstStepTime
    from lightning_lars.callbacks.run_history import RunHistory
    from lightning_lars.callbacks.schedule import ScheduleCallback
    from lightning_lars.provenance import provenance
    from lightning_lars.recipe_plan import apply_plan, make_plan
    from lightning_lars.scaling import plan_batch

    target_checks.check(cfg)  # model name, accelerator, precision: before a W&B run is opened
    rank_zero_info(f"[lightning-lars] recipe {cfg.recipe_name}: {cfg.published.get('claim', '')}")
    strategy = instantiate(cfg.strategy) if "_target_" in cfg.strategy else cfg.strategy.name
    # exact resume needs these whatever the callback config: RNG + W&B id in checkpoints, save on SIGUSR1
    callbacks = [instantiate(c) for c in cfg.callbacks.values()]
    # Ctrl-C too: checkpoint at the next step boundary and print how to resume (a second Ctrl-C aborts)
    callbacks += [ScheduleCallback(), ResumeState(), SignalCheckpoint(), SignalCheckpoint(signal_names=["SIGINT"]), RunHistory()]
    callbacks.append(FirstStepTime(STARTED))  # the time to the first step, as a plan line
    logger = (instantiate(cfg.logger, **resume.logger_kwargs(cfg, ckpt_path))  # same W&B run when resuming
              if cfg.get("logger") and "_target_" in cfg.logger else False)  # ~logger: no logging at all
    plugins = [AtomicCheckpointIO(), *preemption.cluster_plugins()]
    # Evaluation runs after the plan's steps (callbacks.evaluation), not at Lightning's epoch ends.
    trainer = instantiate(cfg.trainer, strategy=strategy, callbacks=callbacks, logger=logger, plugins=plugins,
                          check_val_every_n_epoch=None, val_check_interval=1)

    batch = plan_batch(cfg.batch.global_size, trainer.num_devices, trainer.num_nodes, cfg.batch.max_per_device,
                       cfg.batch.bn_group)
    datamodule = instantiate(cfg.data, batch_size=batch.per_device, seed=cfg.seed)
    plan = make_plan(cfg, cfg.recipe_name, datamodule.num_train_images, trainer.num_devices, trainer.num_nodes)
    apply_plan(trainer, plan)
    config.check_partial("scheduler", plan.base_lr_schedule)
    optimizer = config.check_partial("optimizer", instantiate(cfg.optimizer))
    module = instantiate(cfg.model, optimizer=optimizer, lr_schedule=plan.base_lr_schedule)

    planned_images = cfg.epoch_length.num_train_images
    if planned_images != plan.num_train_images:
        rank_zero_info(f"[lightning-lars] the data has {plan.num_train_images} train images, the recipe was planned"
                       f" at {planned_images} (epoch_length.num_train_images): steps follow the data")
    for line in plan.describe():
        rank_zero_info(f"[lightning-lars] {line}")
    rank_zero_info(f"[lightning-lars] start-up {time.perf_counter() - STARTED:.1f} s (command line to first build)")
    if trainer.logger is not None:
        trainer.logger.log_hyperparams({
            "config": OmegaConf.to_container(cfg, resolve=True),
            "plan": plan.summary(),
            "provenance": provenance(),
        })
    return trainer, module, datamodule, plan.batch_plan


def run(cfg: DictConfig) -> dict[str, float]:
    import lightning as L

    from lightning_lars import report, resume

    L.seed_everything(cfg.seed, workers=True, verbose=False)
    started = time.perf_counter()
    ckpt_path = resume.resolve_ckpt_path(cfg)
    resume.keep_checkpoints_together(cfg, ckpt_path)  # a resumed run saves beside the checkpoint it resumed
    resume.write_resolved_config(cfg)  # what a later `run.ckpt_path=last` compares, $LARS_DATA_DIR resolved
    trainer, module, datamodule, _plan = build(cfg, ckpt_path)
    trainer.fit(module, datamodule=datamodule, ckpt_path=ckpt_path)
    if cfg.run.validate_at_end and not trainer.interrupted:
        trainer.validate(module, datamodule=datamodule, verbose=False)
    metrics = {k: float(v) for k, v in trainer.callback_metrics.items()}
    metrics["time/wall_s"] = time.perf_counter() - started
    if trainer.is_global_zero:
        if trainer.logger is not None:
            trainer.logger.log_metrics({f"final/{k}": v for k, v in metrics.items()})
        report.finish(cfg, metrics, trainer)  # table, results.json, W&B summary table and plots
    return metrics


def fail(err: UserError) -> None:
    print(f"error: {err}", file=sys.stderr, flush=True)
    sys.exit(2)


@hydra.main(version_base="1.3", config_path="conf", config_name="train")
def hydra_main(cfg: DictConfig) -> None:
    from lightning_lars import preemption

    try:
        run(cfg)
    except UserError as err:
        fail(err)
    except InstantiationException as err:
        fail(UserError(config.explain_instantiation_error(err)))
    except preemption.Preempted as stop:  # checkpointed on a signal: a planned stop, exit code 0
        print(f"preempted: {stop}", file=sys.stderr, flush=True)
        if stop.then is not None:  # submitit's handler: rank 0 requeues the job, then exits
            stop.then()


def main() -> None:
    """Checks the command line first so that every mistake is one line, never a traceback."""
    try:
        overrides = [a for a in sys.argv[1:] if "=" in a and not a.startswith("-")]
        cfg, accepted = config.check_command_line(overrides)
        if not preflight.prints_only(sys.argv[1:]):  # `--cfg job` prints the config: no data needed
            preflight.check_dataset(cfg)
    except UserError as err:
        fail(err)
    as_given = dict(zip(overrides, accepted))  # `trainer.max_steps=1` -> `+trainer.max_steps=1` for Hydra
    sys.argv = [sys.argv[0], *(as_given.get(a, a) for a in sys.argv[1:])]
    from lightning_lars import preemption

    sys.argv += preemption.run_dir_overrides(sys.argv[1:])  # under SLURM: one run folder per job id
    hydra_main()


if __name__ == "__main__":
    main()
