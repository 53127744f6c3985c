"""Scenarios built on :class:`lockstep.simulate.Simulator` that need more than its fault table: extra
inventory (storage servers and their links), extra telemetry (a storage leaf's ports) or telemetry in
a real exporter's format carried as an envelope (:mod:`lockstep.scenarios.storage`)."""
