"""Optimizers: LARS, LAMB, NLCG, Neumann and PFN's RMSprop warm-up in their published forms, and the
parameter-group rule that decides which tensors skip weight decay and the trust ratio.

Imports ``core``.
"""
