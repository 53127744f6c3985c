"""Anomaly scorers: one file per algorithm, one small contract (:class:`streams.scorers.base.Scorer`).

- :mod:`streams.scorers.robust` — the production scorer: a robust, seasonal, O(1)-state-per-series
  z-score vectorised across series (numpy), calibrated to ``[0, 1)``.
- :mod:`streams.scorers.hst` — river's HalfSpaceTrees over a multivariate vector per entity (for
  example one node's GPU, NIC and host metrics), calibrated against its own score history.
"""
