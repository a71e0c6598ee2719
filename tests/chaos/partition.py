"""A network partition between one agent and the broker, and its healing.

The agent runs in a network namespace of its own, joined to the host by a veth pair;
it reaches the broker through two relays (tests/chaos/relay.py), because the broker
listens and advertises itself on the host's loopback. The partition takes the host
end of the veth link down: the agent's packets go nowhere, as with a pulled cable,
then the link comes back. Needs root (CAP_NET_ADMIN); without it the row says so.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import time
from collections.abc import Iterator

from tests.chaos.audit import audit_samples, scrape, wait_until
from tests.chaos.context import Context
from tests.chaos.report import Row
from tests.chaos.stack import Service
from tests.servers import ROOT

__all__ = ["agent_partition"]

PREFIX = "part"


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


@contextlib.contextmanager
def _namespace(tag: int) -> Iterator[tuple[str, str, str, str]]:
    """(namespace, host interface, host address, namespace address), removed afterwards."""
    ns, host_if, ns_if = f"flchaos{tag}", f"flc{tag}h", f"flc{tag}n"
    net = f"10.213.{tag % 250}"
    with contextlib.suppress(subprocess.CalledProcessError):  # left by a killed run
        _ip("netns", "del", ns)
    with contextlib.suppress(subprocess.CalledProcessError):
        _ip("link", "del", host_if)
    _ip("netns", "add", ns)
    try:
        _ip("link", "add", host_if, "type", "veth", "peer", "name", ns_if)
        _ip("link", "set", ns_if, "netns", ns)
        _ip("addr", "add", f"{net}.1/30", "dev", host_if)
        _ip("link", "set", host_if, "up")
        _ip("-n", ns, "addr", "add", f"{net}.2/30", "dev", ns_if)
        _ip("-n", ns, "link", "set", ns_if, "up")
        _ip("-n", ns, "link", "set", "lo", "up")
        yield ns, host_if, f"{net}.1", f"{net}.2"
    finally:
        with contextlib.suppress(subprocess.CalledProcessError):
            _ip("link", "del", host_if)
        _ip("netns", "del", ns)


def _services(ctx: Context, ns: str, host_ip: str, ns_ip: str) -> list[Service]:
    ports, tmp = ctx.stack.ports, ctx.stack.tmp
    kafka, relay = str(ports.kafka), str(ports.relay)
    env = {"PYTHONPATH": str(ROOT), "KAFKA_BOOTSTRAP_SERVERS": f"127.0.0.1:{kafka}"}
    in_ns = ("ip", "netns", "exec", ns)
    agent_args = ["--backend", "sim", "--node-prefix", PREFIX, "--nodes", "2"]
    agent_args += ["--gpus-per-node", "2", "--interval-s", str(ctx.stack.interval_s)]
    agent_args += ["--metrics-bind", ns_ip, "--metrics-port", str(ports.partitioned_agent)]
    agent_args += ["--kafka-request-timeout-s", "5", "--no-sim-follows-placements"]
    url = f"http://{ns_ip}:{ports.partitioned_agent}/healthz"
    return [
        Service("relay-host", "tests.chaos.relay", [host_ip, relay, "127.0.0.1", kafka], env,
                tmp / "relay-host.log", None),
        Service("relay-ns", "tests.chaos.relay", ["127.0.0.1", kafka, host_ip, relay], env,
                tmp / "relay-ns.log", None, in_ns),
        Service("agent-partitioned", "fairlane_agent", agent_args, env, tmp / "agent-part.log",
                url, in_ns),
    ]  # fmt: skip


def agent_partition(ctx: Context) -> Row:
    row = Row("Network partition agent <-> broker")
    if os.geteuid() != 0:
        row.notes.append("not run: a network namespace needs root (CAP_NET_ADMIN)")
        return row
    before = ctx.loads()
    with _namespace(ctx.stack.ports.partitioned_agent) as (ns, host_if, host_ip, ns_ip):
        services = _services(ctx, ns, host_ip, ns_ip)
        url = f"http://{ns_ip}:{ctx.stack.ports.partitioned_agent}"
        try:
            for svc in services:
                svc.start()
            metrics = f"{url}/metrics"
            wait_until(lambda: scrape(metrics)["fairlane_agent_samples_published_total"] >= 4, 60)
            _ip("link", "set", host_if, "down")
            cut = time.monotonic()
            time.sleep(ctx.plan.partition_s)
            _ip("link", "set", host_if, "up")
            healed = time.monotonic()
            row.injected = f"veth link to the agent's namespace down {healed - cut:.0f} s"
            if wait_until(lambda: bool(scrape(metrics)), 30) is None:
                row.failures.append("the agent did not answer after healing")
            else:
                backlog = scrape(metrics)["fairlane_agent_samples_buffered"]
                row.notes.append(f"agent backlog just after healing: {backlog:.0f} samples")
            ctx.extra_agents.append(url)
            ctx.finish(row, healed, before)
            part = asyncio.run(audit_samples(ctx.stack.bootstrap, url, PREFIX))
            row.lost += f"; partitioned agent's samples {part.lost}"
            row.duplicated += f"; partitioned agent's samples {part.duplicates}"
            row.check(part.lost == 0, f"partitioned agent lost {part.lost} samples")
            row.check(part.duplicates == 0, f"partitioned agent duplicated {part.duplicates}")
            row.check(part.out_of_order == 0, "partitioned agent's samples out of order")
            row.check(part.read > 0, "partitioned agent collected nothing")
        finally:
            ctx.extra_agents.clear()
            for svc in reversed(services):
                svc.stop()
    return row
