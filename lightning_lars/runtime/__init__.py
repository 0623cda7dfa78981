"""What keeps a run alive across interruptions: which checkpoint it resumes, atomic checkpoint files,
signal-triggered saves, SLURM and submitit preemption.

Imports ``core``, ``config`` and ``parallel`` (`safe_checkpoint`: checkpoints are read as data only).
"""
