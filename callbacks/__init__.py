"""Lightning callbacks, installed as ``lightning_lars.callbacks``: ``monitors`` only observe a run (throughput,
hyperparameters, trust ratios, progress, divergence, time to target); ``techniques`` change it (the LR
schedule, BN span, batch growth, evaluation steps, weight-decay schedules).

Imports every layer up to ``report``; nothing above it.
"""


def find_callback(trainer, kind):
    """The trainer's first callback of type ``kind``, or None (callbacks that read another's numbers look it
    up this way)."""
    return next((c for c in trainer.callbacks if isinstance(c, kind)), None)


def is_log_step(trainer) -> bool:
    """At ``on_train_batch_end``: this micro-batch completed an optimizer step that Lightning writes metrics
    at (every ``trainer.log_every_n_steps`` steps, and the last). Lightning turns a Python number handed to
    ``log`` into a tensor on the module's device, on CUDA a copy from pageable memory that waits for the GPU,
    and drops a step metric logged at any other step: callbacks log only here. Lightning's own two predicates,
    so a resumed run or gradient accumulation cannot put us off its log steps."""
    return not trainer.fit_loop._should_accumulate() and trainer._logger_connector.should_update_logs
