"""Lockstep: streaming event correlation for AI training clusters (the command-line application)."""

from models.version import __version__

__all__ = ["__version__"]
