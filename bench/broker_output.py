"""The broker's work for the scorer's output alone (not a test): a plain aiokafka
producer writes what one worker writes at a given rate, one changelog-sized row per node
record and a score record per GPU, so that `bench.cpu_share` beside it tells how much of
the broker's CPU in the scorer's latency runs the output itself explains
(docs/benchmarks-history.md, "Scorer").

    .venv/bin/python -m bench.cpu_share --seconds 22 > cpu.log &
    .venv/bin/python -m bench.broker_output --bootstrap 127.0.0.1:29396 --rate 1400
    .venv/bin/python -m bench.cpu_share --summary cpu.log --from 4 --to 14

Records go out every 20 ms, as many as are due, and each tick waits for its
acknowledgements (acks=all, idempotent, as the worker's producer). The broker should
have run a few seconds before the measured run (the JVM's warm-up costs it most of a
core at first).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time

from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import TopicAlreadyExistsError

ROWS, SCORES = "bench-output-rows", "bench-output-scores"
NODES = 1250
TICK_S = 0.02


async def create_topics(bootstrap: str, partitions: int) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(t, partitions, 1) for t in (ROWS, SCORES)])
    except TopicAlreadyExistsError:
        pass
    finally:
        await admin.close()


async def produce(args: argparse.Namespace) -> None:
    await create_topics(args.bootstrap, args.partitions)
    producer = AIOKafkaProducer(
        bootstrap_servers=args.bootstrap,
        acks="all",
        enable_idempotence=True,
        linger_ms=5,
        max_batch_size=1 << 20,
        max_request_size=1 << 24,
    )
    await producer.start()
    row, score = os.urandom(args.row_bytes), os.urandom(args.score_bytes)
    start, sent = time.monotonic(), 0
    cpu = time.process_time()
    try:
        while (elapsed := time.monotonic() - start) < args.seconds:
            acks = []
            for record in range(sent, int(elapsed * args.rate)):
                node = f"node-{record % NODES:05d}".encode()
                if args.row_bytes:
                    acks.append(await producer.send(ROWS, row, key=node))
                for gpu in range(args.gpus):
                    acks.append(await producer.send(SCORES, score, key=node + bytes([gpu])))
                sent = record + 1
            await asyncio.gather(*acks)
            await asyncio.sleep(TICK_S)
    finally:
        await producer.stop()
    wall = time.monotonic() - start
    print(
        f"{sent} node records in {wall:.1f} s ({sent / wall:,.0f}/s): a {args.row_bytes}-byte "
        f"row and {args.gpus} {args.score_bytes}-byte scores each; producer CPU "
        f"{time.process_time() - cpu:.1f} s"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap", default="127.0.0.1:29396")
    parser.add_argument("--rate", type=float, default=1400.0, help="node records/s")
    parser.add_argument("--row-bytes", type=int, default=32 * 1024, help="0: no rows")
    parser.add_argument("--gpus", type=int, default=8, help="score records per node record")
    parser.add_argument("--score-bytes", type=int, default=350)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=15.0)
    asyncio.run(produce(parser.parse_args()))


if __name__ == "__main__":
    main()
