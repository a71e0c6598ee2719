"""The broker's requests by kind, per second, while a benchmark runs beside it (not a test).

The broker of a scorer run took 0.75 cores for ~1,100 records/s (docs/benchmarks-history.md,
"Scorer"): per-request work, not bytes. This counts the requests by kind (Produce,
Fetch, OffsetCommit, Heartbeat, Metadata, ...), the broker's time in each, and the
partition fetches and produces per topic, from the broker's JMX RequestMetrics and
BrokerTopicMetrics (bench/BrokerRequests.java, run with the JDK's source launcher).
The broker must be started with JMX on a port of its own, e.g.

    KAFKA_PORT=29296 KAFKA_OPTS="-Dcom.sun.management.jmxremote.port=29299 \\
      -Dcom.sun.management.jmxremote.rmi.port=29299 -Dcom.sun.management.jmxremote.ssl=false \\
      -Dcom.sun.management.jmxremote.authenticate=false -Djava.rmi.server.hostname=127.0.0.1" \\
      scripts/kafka.sh up
    .venv/bin/python -m bench.broker_requests --jmx-port 29299 --seconds 200 > req.log &
    .venv/bin/python -m bench.scorer_throughput --bootstrap 127.0.0.1:29296 --latency-of-max 0.8
    .venv/bin/python -m bench.broker_requests --summary req.log --from T0 --to T1

where T0 and T1 are the steady flow's span on the monotonic clock, as
``bench.scorer_throughput`` prints it. The summary gives each counter's rate per second
between the first and the last line inside the span; ``local_ms`` is the broker's own
time handling requests of a kind (milliseconds per second), ``total_ms`` that plus
queueing and a fetch's wait for data.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from bench.cpu_share import sampler_options

_READER = Path(__file__).with_name("BrokerRequests.java")


def _lines(log: Path) -> list[tuple[float, dict[str, float]]]:
    parsed = []
    for line in log.read_text().splitlines():
        at, *pairs = line.split()
        parsed.append((float(at), {k: float(v) for k, v in (p.split("=", 1) for p in pairs)}))
    return parsed


def summary(log: Path, first_s: float, last_s: float) -> None:
    inside = [(at, counts) for at, counts in _lines(log) if first_s <= at <= last_s]
    if len(inside) < 2:
        sys.exit(f"fewer than two samples between {first_s} and {last_s}")
    (t0, before), (t1, after) = inside[0], inside[-1]
    span = t1 - t0
    rates = {k: (v - before.get(k, 0.0)) / span for k, v in after.items()}
    print(f"over {span:.1f} s (monotonic {t0:.1f} to {t1:.1f}), per second:")
    for group in ("req.", "local_ms.", "total_ms.", "fetch.", "produce.", "msgs.", "bytes."):
        shown = sorted(
            ((rate, k) for k, rate in rates.items() if k.startswith(group) and rate >= 0.05),
            reverse=True,
        )
        print(f"  {group[:-1]}: " + ", ".join(f"{k[len(group) :]} {r:,.1f}" for r, k in shown))


def main() -> None:
    parser = sampler_options(__doc__, seconds=120.0)
    parser.add_argument("--jmx-port", type=int, default=29299)
    args = parser.parse_args()
    if args.summary is not None:
        summary(args.summary, args.first_s, args.last_s)
    else:
        reader = ["java", "-Xmx64m", str(_READER), str(args.jmx_port), str(args.seconds)]
        sys.exit(subprocess.call(reader))


if __name__ == "__main__":
    main()
