"""What every layer may use: the one user-error type, whole-or-nothing file writes, optional dependencies.

Imports nothing of ours and nothing heavy (no torch).
"""
