"""Data: the demo dataset, ImageFolder -> FFCV conversion, the Lightning DataModules (with a seeded held-out
share of the training images for tuning, ``holdout``), and the input files' checks that run before anything
heavy is imported.

Imports ``core``.
"""
