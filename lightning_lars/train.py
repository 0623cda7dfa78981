"""The one entry point: ``python -m lightning_lars.train recipe=NAME key=value ...``.

Hydra composes the job once (its own errors, in its words: a value of the wrong type, an unknown choice or key,
override syntax); at the top of the task function, before torch loads, the checks only we can make run on that
config (rules across fields, the data files on disk) and the run is planned once, at the data's own size
(`check_job`); `lightning_lars.training.run` builds and fits exactly that plan, splitting its batch over the
devices Lightning counts where ``devices: auto`` left that open. A sweep's jobs are checked and planned as each
starts.
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

from lightning_lars.command_line import check_command_line
from lightning_lars.config import rules
from lightning_lars.config.compose import explain_instantiation_error
from lightning_lars.config.override_text import quote_plain_text
from lightning_lars.config.paths import CONF_DIR
from lightning_lars.core.errors import UserError
from lightning_lars.data import checks
from lightning_lars.data.image_count import count_train_images
from lightning_lars.recipe.plan import make_plan, planned_train_images
from lightning_lars.recipe.planned_run import RecipePlan
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
    try:
        # about a second: before torch, Lightning, timm and FFCV (~10 s on 2 cores) load
        plan = check_job(cfg)
    except UserError as err:
        run_folder.discard_refused(cfg.paths.output_dir)  # a refused run leaves no folder behind
        fail(err)
    # torch, Lightning, timm and FFCV take ~10 s to import on 2 cores: imported once the job is checked
    from lightning_lars.runtime import preemption
    from lightning_lars.training.run import run

    run_log.log_to_run_file()  # Hydra has set up train.log by now
    try:
        run(cfg, preemption.started_here(STARTED_PID, STARTED), plan)
    except UserError as err:
        run_folder.discard_refused(cfg.paths.output_dir)
        fail(err)
    except InstantiationException as err:  # Lightning's Trainer(...) refusing an argument, among others
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


def check_job(cfg: DictConfig) -> RecipePlan | None:
    """What only we know about a composed job, and its one plan: rules across fields and values left ``???``
    (`config.rules`), the data files, then the run planned once (`make_plan`) at the size it trains on (the
    data's own count, `count_train_images`) and, where the config fixes the devices, split over them; None for
    a datamodule of the user's own, which `build` plans once it has counted it. Each mistake is one `UserError`
    line. `build` takes the plan and only adds what needs torch: the split over ``devices: auto``, the
    datamodule, the callbacks' value hooks."""
    rules.check(cfg)
    try:
        # data.root=??? included: its message names the command that writes the data
        checks.check_dataset(cfg)
    except UserError:
        # a recipe that cannot run is said before the data it lacks (planned at its size; no run follows)
        make_plan(cfg, cfg.recipe_name, planned_train_images(cfg, cfg.recipe_name), devices=None, nodes=1)
        raise
    images = count_train_images(cfg)
    if images is None:  # a datamodule of the user's own: its size is known once it is built, so build plans
        return None
    # a recipe that cannot run (an evaluation past its end, a batch no device split trains, data smaller than
    # one global batch): refused here, in the plan's own words
    return make_plan(cfg, cfg.recipe_name, images, devices=None, nodes=1, counted=True)


def main() -> None:
    usage.exit_if_asked(sys.argv[1:])
    typed = [a for a in sys.argv[1:] if "=" in a and not a.startswith("-")]
    overrides = [quote_plain_text(a) for a in typed]  # data.root=/data/données: Hydra needs it quoted
    try:
        check_command_line(overrides, sys.argv[1:])
    except UserError as err:
        fail(err)
    # Hydra's argparse takes the overrides as one run of words: `recipe=demo -m seed=0,1` would be refused
    sys.argv = [sys.argv[0], *[a for a in sys.argv[1:] if a not in typed], *overrides]
    if "SLURM_JOB_ID" in os.environ:
        from lightning_lars.runtime import (
            preemption,
        )  # imports Lightning (~5 s): only where SLURM may requeue

        sys.argv += preemption.run_dir_overrides(sys.argv[1:])  # one run folder per job id
    hydra_main()


if __name__ == "__main__":
    main()
