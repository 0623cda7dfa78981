"""The callable a submitit job runs, as hydra-submitit-launcher pickles it: ``__call__`` runs the training entry
point, ``checkpoint`` resubmits the same call (``BaseSubmititLauncher.checkpoint`` returns
``DelayedSubmission(self, *args)``); submitit's signal handler calls it before ``scontrol requeue``."""

from __future__ import annotations

import runpy
import sys

import submitit


class TrainJob:
    def __init__(self, overrides: list[str]):
        self.overrides = overrides

    def __call__(self) -> None:
        sys.argv = ["lightning_lars.train", *self.overrides]
        runpy.run_module("lightning_lars.train", run_name="__main__")  # = python -m lightning_lars.train

    def checkpoint(self, *args, **kwargs):
        return submitit.helpers.DelayedSubmission(self, *args, **kwargs)
