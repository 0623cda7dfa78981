"""Lightning callbacks, installed as ``lightning_lars.callbacks``: ``monitors`` only observe a run (throughput,
hyperparameters, trust ratios, progress, divergence, time to target); ``techniques`` change it (the LR
schedule, BN span, batch growth, evaluation steps, weight-decay schedules).

Imports every layer up to ``report``; nothing above it.
"""


def find_callback(trainer, kind):
    """The trainer's first callback of type ``kind``, or None (callbacks that read another's numbers look it
    up this way)."""
    return next((c for c in trainer.callbacks if isinstance(c, kind)), None)
