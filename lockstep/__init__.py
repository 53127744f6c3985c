"""Lockstep: streaming event correlation for AI training clusters (the command-line application)."""

__version__ = "0.1.0"
