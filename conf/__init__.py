"""Hydra configs, shipped inside the package: Hydra finds them as pkg://lightning_lars.conf, which it accepts
only from a folder that is a Python package (this file), e.g. when run as the installed `lightning-lars` command."""
