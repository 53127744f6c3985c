"""The new formats through their carrier topics (``telemetry.raw.<format>``), found through the registry:
the ``convert`` agent in Faust's own agent test context, outputs through ``build_app(emit=...)``."""

from __future__ import annotations

from typing import Any

from agents.topics import TopicCatalogue, carrier_formats
from tests.agent_context import Sent, captured_app, put_on

from .helpers import load

NEW_FORMATS = {"influx", "nvidia-smi-xml", "nvidia-smi-csv", "kernel-xid", "nccl-warn", "otlp-proto",
               "prometheus-remote-write"}


def make(loop: Any) -> tuple[Any, TopicCatalogue, Sent]:
    app, settings, sent = captured_app(loop)
    return app, TopicCatalogue(settings), sent


def test_every_new_format_has_a_carrier_topic_of_samples():
    assert {name: kind for name, kind in carrier_formats().items() if name in NEW_FORMATS} == \
        dict.fromkeys(NEW_FORMATS, "samples")


def test_kernel_xid_and_nccl_warn_logs_through_their_carriers(loop: Any) -> None:
    app, cat, sent = make(loop)

    async def go() -> None:
        async with app.agents["convert"].test_context() as agent:
            await put_on(agent, cat._n("telemetry.raw.kernel-xid"), load("kernel_xid/journal_kernel.txt"),
                         headers={"source": b"gpu007"}, timestamp=1764502930.0)
            for k in range(2):  # two reads of a job log: the WARN count goes on in the partition's state
                await put_on(agent, cat._n("telemetry.raw.nccl-warn"), load("nccl_warn/nccl_tests_socket.log"),
                             headers={"job_id": b"360"}, timestamp=1764502930.0 + 10 * (k + 1))

    loop.run_until_complete(go())
    gpu = [(key, s["metric"], s["value"], s["ts"]) for t, key, batch, _ in sent if t == cat.telemetry("gpu")
           for s in batch]
    assert {(key, metric, value, ts) for key, metric, value, ts in gpu} == {
        (b"gpu007", "nvrm_xid", 45.0, 1764502930.0)} and len(gpu) == 4  # one event per GPU (4 GPUs)
    nccl = [(key, s["labels"]["cuda_dev"], s["value"]) for t, key, batch, _ in sent if t == cat.telemetry("nccl")
            for s in batch]
    assert nccl == [(b"node-0", "0", 1.0), (b"node-0", "2", 1.0), (b"node-0", "0", 2.0), (b"node-0", "2", 2.0)]
    assert not [t for t, _, _, _ in sent if t == cat.dlq]
