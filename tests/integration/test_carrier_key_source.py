"""The carrier path takes the record key as the source when neither the record nor the headers name one."""

from __future__ import annotations

from typing import Any

from agents.topics import TopicCatalogue
from tests.agent_context import captured_app, put_on

T0 = 1764502930.0
Sent = list[tuple[str, bytes | None, Any, int | None]]



#: A node_exporter-shaped scrape line without host/instance labels, as a keyed producer sends it.
UNLABELLED = b'node_infiniband_symbol_error_total{device="mlx5_0",port="1"} 3 1764502930000\n'


def test_a_keyed_scrape_without_a_source_header_takes_the_key_as_its_source(loop: Any) -> None:
    app, settings, sent = captured_app(loop)
    topic = TopicCatalogue(settings)._n("telemetry.raw.prometheus")

    async def go() -> None:
        async with app.agents["convert"].test_context() as agent:
            await put_on(agent, topic, UNLABELLED, key=b"gpu007")
            await put_on(agent, topic, UNLABELLED, key=b"gpu007", headers={"source": b"gpu008"})
            await put_on(agent, topic, UNLABELLED)  # no key, no header: still a dead letter

    loop.run_until_complete(go())
    samples = [(t, k, [s["source"] for s in batch]) for t, k, batch, _ in sent if t != "lockstep.dlq"]
    assert samples == [("lockstep.telemetry.nic", b"gpu007", ["gpu007"]), ("lockstep.telemetry.nic", b"gpu008",
                                                                          ["gpu008"])]
    (dead,) = [batch for t, _, batch, _ in sent if t == "lockstep.dlq"]
    assert "no source" in dead["reason"] and all(s["ts"] == T0 for _, _, b, _ in sent[:2] for s in b)
