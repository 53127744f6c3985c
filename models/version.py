"""The installed distribution's version (one source: pyproject.toml), for every package that reports it."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version


def lockstep_version() -> str:
    """``lockstep``'s version as installed; ``0+unknown`` when running from sources that were never installed.

    >>> lockstep_version() != ""
    True
    """
    try:
        return version("lockstep")
    except PackageNotFoundError:
        return "0+unknown"


__version__ = lockstep_version()
