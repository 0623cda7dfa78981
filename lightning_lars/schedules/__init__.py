"""Schedules as small frozen ``step -> value`` objects (LR, weight decay, batch growth, the RMSprop
blend), the published sources' own forms, and the one LR scaling rule with the global-batch plan.

phases (the clock and what every LR schedule exposes) < lr, source, batch_growth, rmsprop_blend < build.
Imports ``core``.
"""
