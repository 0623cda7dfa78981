"""Training: the one LightningModule, the checks only a ``_target_`` can judge, and the assembly of a run
(trainer, callbacks, logger, plan) that the entry point calls; a recipe planned with the callbacks that set a
value per step, built here for the recipe card (recipe_plan.py).

Imports every layer below it.
"""
