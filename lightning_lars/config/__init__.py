"""The config: where it lives, its typed schema, Hydra composition and the command-line checks.

Imports ``core`` only, and no torch, Lightning or timm: a mistake on the command line is reported in about a
second.
"""
