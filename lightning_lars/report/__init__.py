"""The end of a run: the results table beside the published numbers, ``results.json``, ``report.png``, the
W&B logger and the run's provenance. A run's numbers arrive here as data.

Imports ``core``, ``config`` and ``recipe``.
"""
