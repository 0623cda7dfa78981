"""Optimizers: LARS and LAMB in the published forms."""
