"""Training: the one LightningModule, the checks only a ``_target_`` can judge, and the assembly of a run
(trainer, callbacks, logger) that the entry point calls; a recipe planned with the callbacks that set a value per
step, for the recipe card and for a run on the devices Lightning counts (recipe_plan.py).

Imports every layer below it.
"""
