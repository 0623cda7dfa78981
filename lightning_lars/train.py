"""The one entry point: ``python -m lightning_lars.train recipe=NAME key=value ...``.

The command line is checked first (config, recipe, data files: one line per mistake, in about a second), then
Hydra composes the job and `lightning_lars.training.run` assembles and fits it.
"""

from __future__ import annotations

import logging
import os
import sys
import time
import warnings
from pathlib import Path

STARTED = time.perf_counter()  # before the heavy imports: the plan line reports the start-up time
STARTED_PID = os.getpid()  # a submitit job runs hydra_main in another process: see preemption.started_here

from lightning_lars.config import usage

# the usage screen before Hydra, the configs and torch load (~1 s of imports here; Hydra's help took a minute)
if __name__ == "__main__" or Path(sys.argv[0]).name == "lightning-lars":
    usage.exit_if_asked(sys.argv[1:])

import hydra
from hydra.errors import InstantiationException
from omegaconf import DictConfig
from omegaconf.errors import OmegaConfBaseException

from lightning_lars.config.compose import explain_instantiation_error
from lightning_lars.config.jobs import MULTIRUN_FLAGS, is_multirun, prints_only, sweep_jobs
from lightning_lars.config.override_text import quote_plain_text
from lightning_lars.config.paths import CONF_DIR, unwritable_reason
from lightning_lars.core.errors import UserError
from lightning_lars.data import checks
from lightning_lars.data.image_count import count_train_images
from lightning_lars.recipe.plan import check_command_line, make_plan, recipe_of
from lightning_lars.runtime import run_folder, run_log

# Lightning advertises its hosted logger at every start; in SLURM logs it reads like a warning. Our
# val_check_interval=1 only lets EvaluationSchedule choose the steps: "validation will run after every batch" is untrue.
# Its device banner ("GPU available: False, used: False", the same for TPUs) opens every log; the plan line says
# the devices a run uses, and Lightning still warns of a GPU it does not use. A filter on Lightning's rank-zero
# logger, which Lightning's docs name for its console output: our own plan lines go through it too.
NOISE = ("litlogger", "`Trainer(val_check_interval=1)` was configured", "GPU available: ", "TPU available: ")
logging.getLogger("lightning.pytorch.utilities.rank_zero").addFilter(
    lambda r: not any(text in r.getMessage() for text in NOISE)
)
# Lightning 2.6 calls a torch pytree API that torch 2.14 deprecates, once per run: not the user's to fix.
warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\)")
run_log.quiet_noise()  # before Lightning's SLURM check, which runs when the run folder is chosen


def fail(err: UserError) -> None:
    print(f"error: {err}", file=sys.stderr, flush=True)
    sys.exit(2)


@hydra.main(version_base="1.3", config_path=str(CONF_DIR), config_name="train")
def hydra_main(cfg: DictConfig) -> None:
    # torch, Lightning, timm and FFCV take ~10 s to import on 2 cores: imported once the command line is checked
    from lightning_lars.runtime import preemption
    from lightning_lars.training.run import run

    run_log.log_to_run_file()  # Hydra has set up train.log by now
    try:
        run(cfg, preemption.started_here(STARTED_PID, STARTED))
    except UserError as err:
        run_folder.discard_refused(cfg.paths.output_dir)  # a refused run leaves no folder behind
        fail(err)
    except InstantiationException as err:
        run_folder.discard_refused(cfg.paths.output_dir)
        fail(UserError(explain_instantiation_error(err)))
    except run_folder.Finished as done:  # nothing to resume: not a mistake, exit code 0
        run_folder.discard_refused(cfg.paths.output_dir)
        print(done, file=sys.stderr, flush=True)
    except preemption.Preempted as stop:  # stopped on a signal: 0 for a requeue, 130 Ctrl-C, 143 SIGTERM
        print(f"preempted: {stop}", file=sys.stderr, flush=True)
        if stop.then is not None:  # submitit's handler: rank 0 requeues the job, then exits
            stop.then()
        if stop.exit_status:  # Ctrl-C, SIGTERM: the shell and schedulers expect a killed process's status
            sys.exit(stop.exit_status)


# Hydra refuses these beside -m/--multirun (with a traceback): it prints one config, a sweep has many.
SWEEP_CANNOT_PRINT = ("--cfg", "-c", "--info", "-i", "--shell-completion", "-sc")


def check_jobs(overrides: list[str], argv: list[str]) -> list[str]:
    """Every job the command line makes (each job of a sweep under ``-m``) is checked; returns ``overrides`` as
    Hydra must get them (a Trainer argument the config does not set gets its ``+``)."""
    multirun = is_multirun(argv)
    if any(a.partition("=")[0] in SWEEP_CANNOT_PRINT for a in argv) and any(
        a in MULTIRUN_FLAGS for a in argv
    ):
        raise UserError(
            "-m/--multirun runs a sweep and cannot print: leave it out and give each swept key one value to see"
            " that job's config (--cfg job)"
        )
    jobs = sweep_jobs(overrides) if multirun else [overrides]
    plussed = set()
    for job in jobs:
        given = [o for o in job if o is not None]
        try:
            cfg, accepted = check_command_line(given)
            if not prints_only(argv):  # `--cfg job` prints the config: no data needed
                check_log_dir(cfg, given)
                checks.check_dataset(cfg)
                check_data_size(cfg, recipe_of(given))
        except UserError as err:
            swept = [o for o, whole in zip(job, overrides) if o is not None and o != whole]
            raise UserError(f"the sweep's job {' '.join(swept)}: {err}" if swept else str(err)) from None
        plussed |= {a.removeprefix("+") for o, a in zip(given, accepted) if a != o}
    keys = {o.partition("=")[0] for o in plussed}
    return [f"+{o}" if o.partition("=")[0] in keys and not o.startswith(("+", "~")) else o for o in overrides]


def check_log_dir(cfg: DictConfig, overrides: list[str]) -> None:
    """A ``paths.log_dir`` (or a ``hydra.run.dir`` given) that no run folder can be made in: refused here, not as
    Hydra's traceback when it makes the run folder; so is a ``hydra.run.dir`` of a finished run, before Hydra
    writes into it (`run_folder.refuse_finished`)."""
    try:
        folders = {"paths.log_dir": str(cfg.paths.log_dir)}
    except OmegaConfBaseException:  # a value that needs Hydra's runtime: Hydra resolves it
        folders = {}
    for override in overrides:
        key, _, value = override.lstrip("+").partition("=")
        if key in ("hydra.run.dir", "hydra.sweep.dir") and "${" not in value:
            folders[key] = value.strip("'\"")
    if "hydra.run.dir" in folders:  # a finished run there is never replaced by a new one
        run_folder.refuse_finished(folders["hydra.run.dir"], cfg.run.get("ckpt_path"))
    for key, folder in folders.items():
        reason = unwritable_reason(Path(folder))
        if reason is not None:
            raise UserError(
                f"{key}={folder}: no run folder can be made there ({reason}); set {key} to a folder you can"
                f" write, e.g. {key}={Path.home() / 'lightning-lars-logs'}"
            )


def check_data_size(cfg: DictConfig, recipe: str) -> None:
    """Data too small for one global batch: refused here, before Hydra makes a run folder and a logger starts
    (the run plans again on the data's own count, the same way)."""
    global_size = int(cfg.batch.global_size)
    images = count_train_images(cfg, up_to=global_size)
    if images is not None and images < global_size:
        make_plan(cfg, recipe, images, devices=None, nodes=1, counted=True)


def main() -> None:
    """Checks the command line first so that every mistake is one line, never a traceback."""
    usage.exit_if_asked(sys.argv[1:])
    try:
        typed = [a for a in sys.argv[1:] if "=" in a and not a.startswith("-")]
        overrides = [quote_plain_text(a) for a in typed]  # data.root=/data/données: Hydra needs it quoted
        accepted = check_jobs(overrides, sys.argv[1:])
    except UserError as err:
        fail(err)
    # Hydra's argparse takes the overrides as one run of words: `recipe=demo -m seed=0,1` would be refused
    flags = [a for a in sys.argv[1:] if a not in typed]
    sys.argv = [sys.argv[0], *flags, *accepted]  # accepted: `trainer.max_steps=1` -> `+trainer.max_steps=1`
    # imports Lightning (~5 s): only once the command line is checked
    from lightning_lars.runtime import preemption

    sys.argv += preemption.run_dir_overrides(sys.argv[1:])  # under SLURM: one run folder per job id
    hydra_main()


if __name__ == "__main__":
    main()
