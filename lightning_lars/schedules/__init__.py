"""Schedules as pure ``step -> value`` objects (LR, weight decay, batch growth), the published sources' own
forms, and the one LR scaling rule with the global-batch plan.

Imports ``core``.
"""
