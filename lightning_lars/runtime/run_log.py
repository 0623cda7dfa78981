"""The run's ``train.log``, and what the console leaves out.

Hydra's job logging writes the root logger's records to ``<run folder>/train.log``. Lightning, imported before
Hydra sets up logging, gives its ``lightning.pytorch`` and ``lightning.fabric`` loggers a console handler of their
own and stops them propagating, so every line a run prints through them (the plan, the recipe's claim, Lightning's
own) missed the file, which stayed empty. `log_to_run_file` adds Hydra's file handlers to those loggers. Imported
after Hydra set up logging (the entry point loads Lightning once the job is checked), Lightning leaves them
propagating, and Hydra's console format and Lightning's own ``lightning`` handler would print each line twice:
they get the console handler Lightning gives them when it comes first.

The console leaves out what is noise at every start: the model summary (a table of parameter counts; it still goes
to train.log) and the hint to prepend ``srun`` on any machine where SLURM is installed (our launchers start the
ranks). Lightning's "Checkpoint directory ... exists and is not empty" never comes: it is ModelCheckpoint's, and our
checkpoint callback (runtime/checkpointing.py) is built on Lightning's ``Checkpoint`` base, which has no such line,
so a resumed run writes into the folder it resumed from without it.

What the console shows by ``print`` or as a tqdm bar (the progress lines, each evaluation, the results table)
reaches train.log through `to_run_file`, for a cluster user who reads the file, not the terminal.
"""

from __future__ import annotations

import logging
import warnings

LIGHTNING_LOGGERS = ("lightning.pytorch", "lightning.fabric")
FILE_ONLY_LOGGERS = ("lightning.pytorch.callbacks.model_summary",)
NOISE_WARNINGS = (r"The `srun` command is available on your system but is not used",)
# Records for train.log alone: the console printed or drew their text already. Not propagated to the root logger
# (its console handler would print them twice); `log_to_run_file` gives it Hydra's file handlers.
RUN_FILE_LOGGER = logging.getLogger("lightning_lars.run_file")
RUN_FILE_LOGGER.propagate = False


def to_run_file(text: str) -> None:
    """Each line of ``text`` as one record of train.log (a no-op before Hydra has opened the file)."""
    for line in text.strip("\n").splitlines():
        RUN_FILE_LOGGER.info(line)


def _not_file_only(record: logging.LogRecord) -> bool:
    return record.name not in FILE_ONLY_LOGGERS


def log_to_run_file() -> None:
    """Lightning's records into Hydra's file handlers (train.log); its console handler drops the model summary."""
    files = [h for h in logging.getLogger().handlers if isinstance(h, logging.FileHandler)]
    for name in LIGHTNING_LOGGERS:
        logger = logging.getLogger(name)
        if logger.propagate and not logger.handlers:  # Lightning imported after Hydra: as if imported first
            logger.addHandler(logging.StreamHandler())
            logger.propagate = False
        if logger.propagate:  # reaches the root's handlers, train.log among them, already
            continue
        for handler in logger.handlers:
            if not isinstance(handler, logging.FileHandler):
                handler.addFilter(_not_file_only)
        for handler in files:
            if handler not in logger.handlers:
                logger.addHandler(handler)
    RUN_FILE_LOGGER.setLevel(logging.INFO)
    # this job's files only: a sweep's next job in this process writes its own train.log, not the last one's too
    RUN_FILE_LOGGER.handlers = files


def quiet_noise() -> None:
    for message in NOISE_WARNINGS:
        warnings.filterwarnings("ignore", message=f".*{message}")
