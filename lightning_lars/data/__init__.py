"""Data: the demo dataset, ImageFolder -> FFCV conversion, the Lightning DataModules, and the input files'
checks that run before anything heavy is imported.

Imports ``core``.
"""
