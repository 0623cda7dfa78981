"""Training: the one LightningModule, the checks only a ``_target_`` can judge, and the assembly of a run
(trainer, callbacks, logger, plan) that the entry point calls.

Imports every layer below it.
"""
