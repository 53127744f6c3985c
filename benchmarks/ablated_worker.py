"""``lockstep worker`` with its ingest stages cut after one of them: where a worker's CPU a sample goes.

    python -m benchmarks.ablated_worker validate   # then as `python -m lockstep.cli worker`

Runs the worker of the tree on ``sys.path`` with :data:`streams.pipeline.INGEST_STAGES` up to and
including the stage named (a prefix of the pipeline: each stage reads what the ones before it left,
so a prefix is a worker that does less, never one that breaks), everything else as it is: the lanes,
the correlate agent, snapshots, outputs of the stages that run. A measuring tool only
(:mod:`benchmarks.worker_ab` ``--upto``); the stages a worker runs are not a setting.

The cuts that mean something, and what the difference between two of them measures:

- ``validate``: consume, hand over, decode and validate (the floor of any Lockstep worker on this
  message format: what a sample costs before anything is computed from it);
- ``rate``: ... and normalise, the fabric rollup, source clocks and counter rates;
- ``episodes``: ... and the detector bank's scores and the episodes they end or start;
- ``points`` (the whole pipeline): ... and each job's points records, with the correlation they feed.
"""

from __future__ import annotations

import sys
from typing import Any

from streams import pipeline


def cut_stages(upto: str) -> tuple[Any, ...]:
    """The ingest stages up to and including ``upto`` (ValueError: no such stage).

    >>> [s.name for s in cut_stages("validate")]
    ['decode', 'validate']
    """
    names = [s.name for s in pipeline.INGEST_STAGES]
    if upto not in names:
        raise ValueError(f"no ingest stage {upto!r}: one of {', '.join(names)}")
    return pipeline.INGEST_STAGES[:names.index(upto) + 1]


def install(upto: str) -> None:
    """Every :class:`streams.pipeline.PartitionPipeline` made from now on runs :func:`cut_stages`."""
    stages = cut_stages(upto)
    init = pipeline.PartitionPipeline.__init__

    def cut_init(self: Any, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("stages", stages)
        init(self, *args, **kwargs)

    pipeline.PartitionPipeline.__init__ = cut_init  # type: ignore[method-assign]


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    install(argv[0])
    from lockstep.cli import main as cli

    return cli(["worker", *argv[1:]])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
