"""Callbacks that change training: they apply a schedule or a published technique at each step."""
