"""Hydra configs, installed as ``lightning_lars.conf`` (pyproject's package-dir); the entry point names this
folder to Hydra by its path (lightning_lars/config/paths.py)."""
