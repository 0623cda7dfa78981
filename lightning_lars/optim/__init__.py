"""Optimizers: LARS, LAMB, NLCG, Neumann and PFN's RMSprop warm-up in their published forms, and the
parameter-group rule that decides which tensors skip weight decay and the trust ratio.

Imports ``core``.
"""

from lightning_lars.optim.lamb import LAMB
from lightning_lars.optim.lars import LARS
from lightning_lars.optim.layerwise import LayerwiseOptimizer
from lightning_lars.optim.neumann import Neumann
from lightning_lars.optim.nlcg import NLCG
from lightning_lars.optim.param_groups import param_groups
from lightning_lars.optim.rmsprop_warmup import RMSpropWarmup

# the public API (README, "Python API"): what a user's own Lightning code imports from here
__all__ = ["LAMB", "LARS", "NLCG", "LayerwiseOptimizer", "Neumann", "RMSpropWarmup", "param_groups"]
