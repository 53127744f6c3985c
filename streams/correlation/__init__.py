"""Correlation on event time, one module per concern.

- :mod:`~streams.correlation.correlator`: :class:`Correlator`, the state of one ``anomalies`` partition
  (inputs, judging on each new watermark, snapshot/restore);
- :mod:`~streams.correlation.watermark`: the watermark from the input partitions' progress;
- :mod:`~streams.correlation.timeline`: a job's episodes (:class:`JobTimeline`, :data:`EpisodeKey`);
- :mod:`~streams.correlation.evidence`: the first mover and the timeline an alert shows;
- :mod:`~streams.correlation.domains`: the bottleneck domain, as a table of rules;
- :mod:`~streams.correlation.keys`: dedup keys, alert ids, contention keys;
- :mod:`~streams.correlation.rule`: the :class:`Rule` contract and what a rule is given;
- :mod:`~streams.correlation.rules`: one module per rule, listed in :mod:`~streams.correlation.registry`.
"""
