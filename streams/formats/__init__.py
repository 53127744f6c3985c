"""Real-world formats -> native samples and inventory events, one pure adapter per format.

Use :func:`convert` (the one entry point, shared by the agents and ``lockstep convert``) and
:data:`FORMATS` (every format by name). docs/vocabulary.md maps every raw metric name the adapters
produce to its operational meaning.

>>> from streams.formats import FORMATS, convert
>>> "prometheus" in FORMATS and "slurm-sacct" in FORMATS
True
"""

from __future__ import annotations

from streams.formats.base import Adapter, Converted, FormatRejection
from streams.formats.registry import FORMATS, UnknownFormat, convert
from streams.formats.state import AdapterState

__all__ = ["FORMATS", "Adapter", "AdapterState", "Converted", "FormatRejection", "UnknownFormat", "convert"]
