"""What every layer may use: the one user-error type, whole-or-nothing file writes, optional dependencies,
package exports loaded on first use.

Imports nothing of ours and nothing heavy (no torch).
"""
