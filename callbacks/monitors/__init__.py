"""Callbacks that only observe: they log, print or stop a run, and never change what it computes."""
