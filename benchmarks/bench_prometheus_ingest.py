"""Converting a Prometheus scrape of 1,000 samples, next to bare-parse baselines measured in the same run.

    python benchmarks/bench_prometheus_ingest.py [--samples 1000] [--repeat 200]

The scrape is a realistic mix: dcgm-exporter GPU fields (long label sets, Hostname/UUID/pod...),
node_exporter InfiniBand counters and CPU seconds, with ``# HELP``/``# TYPE`` lines and millisecond
timestamps. Rows printed (median of ``--repeat`` runs, samples per second):

- ``text split``: bare text parse, ``splitlines`` + ``split`` + ``float`` per line, no labels: the
  floor any text parser pays;
- ``orjson native``: ``orjson.loads`` of the same 1,000 samples as a native JSON batch: the floor of
  the native ingest path;
- ``native decode_batch``: the native path itself (orjson + contract validation, streams.ingest);
- ``prometheus_client parser``: the reference Python parser (``text_string_to_metric_families``);
- ``convert(prometheus)``: :func:`streams.formats.convert`, the full adapter (labels, kinds,
  profiles, source, native contract validation, derived-gauge pass) with a carried state.
Timings are wall-clock, single-threaded, on this machine.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import orjson
from prometheus_client.parser import text_string_to_metric_families

from streams.formats import AdapterState, convert
from streams.ingest import decode_batch

T0_MS = 1764502930000
DCGM_FIELDS = (("DCGM_FI_DEV_SM_CLOCK", "gauge", 1980), ("DCGM_FI_DEV_GPU_TEMP", "gauge", 64),
               ("DCGM_FI_DEV_GPU_UTIL", "gauge", 97), ("DCGM_FI_DEV_POWER_USAGE", "gauge", 612.4),
               ("DCGM_FI_DEV_XID_ERRORS", "gauge", 0), ("DCGM_FI_PROF_SM_ACTIVE", "gauge", 0.91),
               ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "counter", 0), ("DCGM_FI_DEV_THERMAL_VIOLATION", "counter", 0))
IB_FIELDS = ("symbol_error_total", "link_downed_total", "port_transmit_wait_total", "port_data_transmitted_bytes_total",
             "port_discards_transmitted_total")


def make_scrape(n: int) -> tuple[bytes, list[dict[str, object]]]:
    """A scrape of exactly ``n`` samples and the same samples as native dicts."""
    lines: list[str] = []
    native: list[dict[str, object]] = []
    count = 0
    host = 0
    while count < n:
        host += 1
        node = f"gpu{host:03d}"
        for name, kind, value in DCGM_FIELDS:
            lines.append(f"# HELP {name} {name} as dcgm-exporter reports it.")
            lines.append(f"# TYPE {name} {kind}")
            for gpu in range(8):
                if count >= n:
                    break
                labels = {"gpu": str(gpu), "UUID": f"GPU-{host:04d}{gpu:04d}-604ac76c-d9cf-fef3-62e9",
                          "device": f"nvidia{gpu}", "modelName": "NVIDIA H100 80GB HBM3", "Hostname": node,
                          "DCGM_FI_DRIVER_VERSION": "550.127.08", "container": "pytorch", "namespace": "training",
                          "pod": f"llm-70b-worker-{host}"}
                text = ",".join(f'{k}="{v}"' for k, v in labels.items())
                lines.append(f"{name}{{{text}}} {value} {T0_MS}")
                native.append({"ts": T0_MS / 1000, "layer": "gpu", "source": node, "metric": name,
                               "value": float(value), "labels": labels, "kind": kind})
                count += 1
        for field in IB_FIELDS:
            name = f"node_infiniband_{field}"
            lines.append(f"# TYPE {name} counter")
            for dev in range(4):
                if count >= n:
                    break
                lines.append(f'{name}{{device="mlx5_{dev}",port="1",instance="{node}:9100"}} {1000 + dev} {T0_MS}')
                native.append({"ts": T0_MS / 1000, "layer": "nic", "source": node, "metric": name, "value": 1000.0,
                               "labels": {"device": f"mlx5_{dev}", "port": "1", "instance": f"{node}:9100"},
                               "kind": "counter"})
                count += 1
    return ("\n".join(lines) + "\n").encode(), native


def text_split(raw: bytes) -> int:
    n = 0
    for line in raw.decode().splitlines():
        if line and line[0] != "#":
            parts = line.rsplit(" ", 2)
            float(parts[-2])
            n += 1
    return n


def prom_client(raw: bytes) -> int:
    return sum(len(f.samples) for f in text_string_to_metric_families(raw.decode()))


def timed(fn: Callable[[], int], repeat: int) -> tuple[float, int]:
    times = []
    n = 0
    for _ in range(repeat):
        start = time.perf_counter()
        n = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--samples", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=200)
    args = ap.parse_args()
    raw, native = make_scrape(args.samples)
    native_raw = orjson.dumps(native)
    state = AdapterState()
    check = convert("prometheus", raw, state=state)
    assert len(check.samples) == args.samples and not check.rejections, check.rejections[:3]
    rows = [
        ("text split (baseline)", lambda: text_split(raw)),
        ("orjson native (baseline)", lambda: len(orjson.loads(native_raw))),
        ("native decode_batch", lambda: len(decode_batch(native_raw).samples)),
        ("prometheus_client parser", lambda: prom_client(raw)),
        ("convert(prometheus)", lambda: len(convert("prometheus", raw, state=state).samples)),
    ]
    print(f"scrape: {args.samples} samples, {len(raw) / 1024:.1f} KiB text ({len(native_raw) / 1024:.1f} KiB as "
          f"native JSON); median of {args.repeat} runs")
    print(f"{'path':<28}{'ms/scrape':>11}{'samples/s':>13}{'x baseline':>12}")
    base = None
    for name, fn in rows:
        seconds, n = timed(fn, args.repeat)
        assert n == args.samples, (name, n)
        rate = n / seconds
        if base is None:
            base = rate
        print(f"{name:<28}{seconds * 1e3:>11.3f}{rate:>13,.0f}{rate / base:>12.3f}")


if __name__ == "__main__":
    main()
