"""A recipe's run planned without data or a GPU: steps per epoch, evaluation steps, the LR schedule, the
recipe card and the catalogue of recipes with their published results, and MLCommons' reference convergence
points (read from the optional mlperf-logging package) that the card sets beside a LARS recipe; a recipe shrunk
to a short run on a small data set and the large-batch bench's arms (``shrink``, ``bench_runs``).

Imports ``core``, ``config`` and ``schedules``.
"""
