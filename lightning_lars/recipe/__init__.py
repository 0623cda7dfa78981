"""A recipe's run planned without data or a GPU: steps per epoch, evaluation steps, the LR schedule, the
recipe card and the catalogue of recipes with their published results.

Imports ``core``, ``config`` and ``schedules``.
"""
