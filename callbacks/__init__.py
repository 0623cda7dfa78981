"""Lightning callbacks: schedules, throughput, time-to-target, trust ratios, divergence guard."""


def find_callback(trainer, kind):
    """The trainer's first callback of type ``kind``, or None (the report and callbacks that read another's
    numbers look it up this way)."""
    return next((c for c in trainer.callbacks if isinstance(c, kind)), None)
