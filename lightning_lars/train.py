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

# Lightning advertises its hosted logger at every start; in SLURM logs it reads like a warning.
logging.getLogger("lightning.pytorch.utilities.rank_zero").addFilter(lambda r: "litlogger" not in r.getMessage())
# Lightning 2.6 calls a torch pytree API that torch 2.14 deprecates, once per run: not the user's to fix.
warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\)")


def build(cfg: DictConfig, ckpt_path: str | None = None):
    """Instantiate every part; returns (trainer, module, datamodule, plan). ``ckpt_path``: the run being resumed."""
    from lightning.pytorch.utilities import rank_zero_info

    from lightning_lars import preemption, resume, target_checks
    from lightning_lars.callbacks.batch_norm import BatchNormGroups
    from lightning_lars.callbacks.checkpointing import AtomicCheckpointIO, ResumeState, SignalCheckpoint
    from lightning_lars.callbacks.run_history import RunHistory
    from lightning_lars.callbacks.schedule import ScheduleCallback
    from lightning_lars.provenance import provenance
    from lightning_lars.scaling import plan_batch
    from lightning_lars.schedules import build_lr_schedule

    target_checks.check(cfg)  # model name, accelerator, precision: before a W&B run is opened
    rank_zero_info(f"[lightning-lars] recipe {cfg.recipe_name}: {cfg.published.get('claim', '')}")
    strategy = instantiate(cfg.strategy) if "_target_" in cfg.strategy else cfg.strategy.name
    # exact resume needs these whatever the callback config: RNG + W&B id in checkpoints, save on SIGUSR1
    callbacks = [instantiate(c) for c in cfg.callbacks.values()]
    # Ctrl-C too: checkpoint at the next step boundary and print how to resume (a second Ctrl-C aborts)
    callbacks += [ScheduleCallback(), ResumeState(), SignalCheckpoint(), SignalCheckpoint("SIGINT"), RunHistory()]
    logger = (instantiate(cfg.logger, **resume.logger_kwargs(cfg, ckpt_path))  # same W&B run when resuming
              if cfg.get("logger") and "_target_" in cfg.logger else False)  # ~logger: no logging at all
    plugins = [AtomicCheckpointIO(), *preemption.cluster_plugins()]
    trainer = instantiate(cfg.trainer, strategy=strategy, callbacks=callbacks, logger=logger, plugins=plugins)

    plan = plan_batch(cfg.batch.global_size, trainer.num_devices, trainer.num_nodes, cfg.batch.max_per_device,
                      cfg.batch.bn_group)
    trainer.accumulate_grad_batches = plan.accumulation
    trainer.callbacks.append(BatchNormGroups(plan))  # BN statistics over the recipe's span (ghost / synced)
    datamodule = instantiate(cfg.data, batch_size=plan.per_device, seed=cfg.seed)
    steps_per_epoch = datamodule.num_train_images // plan.global_size  # drop-last: every step is a full batch
    if steps_per_epoch == 0:
        raise UserError(
            f"global batch {plan.global_size} exceeds the {datamodule.num_train_images} training images;"
            " set batch.global_size=N with N at most the dataset size (e.g. debug=toy)"
        )

    lr_schedule, peak_lr = build_lr_schedule(OmegaConf.to_container(cfg.scheduler), plan.global_size,
                                             steps_per_epoch, trainer.max_epochs)
    config.check_partial("scheduler", lr_schedule)
    optimizer = config.check_partial("optimizer", instantiate(cfg.optimizer))
    module = instantiate(cfg.model, optimizer=optimizer, lr_schedule=lr_schedule)

    rank_zero_info(
        f"[lightning-lars] plan: {plan.describe()}; {steps_per_epoch} steps/epoch"
        f" x {trainer.max_epochs} epochs; peak LR {peak_lr:.6g}; start-up {time.perf_counter() - STARTED:.1f} s"
    )
    if trainer.logger is not None:
        trainer.logger.log_hyperparams({
            "config": OmegaConf.to_container(cfg, resolve=True),
            "plan": {**plan.__dict__, "steps_per_epoch": steps_per_epoch, "peak_lr": peak_lr},
            "provenance": provenance(),
        })
    return trainer, module, datamodule, plan


def run(cfg: DictConfig) -> dict[str, float]:
    import lightning as L

    from lightning_lars import report, resume

    L.seed_everything(cfg.seed, workers=True, verbose=False)
    started = time.perf_counter()
    ckpt_path = resume.resolve_ckpt_path(cfg)
    resume.keep_checkpoints_together(cfg, ckpt_path)  # a resumed run saves beside the checkpoint it resumed
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


def main() -> None:
    """Checks the command line first so that every mistake is one line, never a traceback."""
    try:
        overrides = [a for a in sys.argv[1:] if "=" in a and not a.startswith("-")]
        cfg, accepted = config.check_command_line(overrides)
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
