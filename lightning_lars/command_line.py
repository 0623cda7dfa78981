"""What the entry point's command line decides by its text alone, before Hydra composes a config or makes a run
folder (`lightning_lars.train`): a sweep asked to print, its keys (`lightning_lars.config.override_keys`), and a
folder given for the run that cannot be made or holds a finished run.
"""

from __future__ import annotations

from pathlib import Path

from lightning_lars.config.override_keys import check_override_keys
from lightning_lars.config.paths import unwritable_reason
from lightning_lars.core.errors import UserError
from lightning_lars.runtime import run_folder

# Hydra refuses these beside -m/--multirun (with a traceback): it prints one config, a sweep has many.
SWEEP_CANNOT_PRINT = ("--cfg", "-c", "--info", "-i")


def check_command_line(overrides: list[str], argv: list[str] = ()) -> None:
    """What the command line's text alone decides, before Hydra makes a run folder: the recipe's name (with the
    one it most likely means), a key the run sets itself, and a folder given for the run that cannot be made or
    holds a finished run."""
    if {"-m", "--multirun"} & set(argv) and {a.partition("=")[0] for a in argv} & set(SWEEP_CANNOT_PRINT):
        raise UserError(
            "-m/--multirun runs a sweep and cannot print: leave it out and give each swept key one value to see"
            " that job's config (--cfg job)"
        )
    check_override_keys(overrides)
    given = dict(o.lstrip("+").partition("=")[::2] for o in overrides)
    folders = {
        k: given[k].strip("'\"") for k in ("paths.log_dir", "hydra.run.dir", "hydra.sweep.dir") if k in given
    }
    folders = {k: v for k, v in folders.items() if "${" not in v}  # Hydra resolves those
    if "hydra.run.dir" in folders:  # a finished run there is never replaced by a new one
        run_folder.refuse_finished(folders["hydra.run.dir"], given.get("run.ckpt_path"))
    for key, folder in folders.items():
        reason = unwritable_reason(Path(folder))
        if reason is not None:
            raise UserError(
                f"{key}={folder}: no run folder can be made there ({reason}); set {key} to a folder you can"
                f" write, e.g. {key}={Path.home() / 'lightning-lars-logs'}"
            )
