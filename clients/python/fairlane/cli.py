"""``fairlane``: the command line (docs/launcher.md).

    fairlane run [flags] -- COMMAND...                   place, run, release
    fairlane join PLACEMENT_ID [flags] -- COMMAND...     one node of a multi-host run

Flags say the job's shape; the scheduler's address, the token and Kafka come from the
environment (:class:`~fairlane.settings.LauncherSettings`). A wrong flag or setting is
one line and exit code 2, as the services do.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import socket
import sys
import uuid
from collections.abc import Sequence
from typing import Any, NoReturn

from pydantic import TypeAdapter, ValidationError

from fairlane.launcher import join, launch
from fairlane.models import PlacementRequest
from fairlane.settings import LauncherSettings
from fairlane.specs import JobSpec, JoinSpec
from fairlane_events.records import JobClass
from fairlane_runtime.entry import exit_with_error, load_settings

__all__ = ["main", "parse"]

PROG = "fairlane"
_CLASS = TypeAdapter(JobClass)


class _Parser(argparse.ArgumentParser):
    """argparse whose errors are one line (``fairlane: error: ...``) and exit code 2."""

    def error(self, message: str) -> NoReturn:
        exit_with_error(PROG, message)


def _signal(value: str) -> signal.Signals | None:
    if value.lower() == "none":
        return None
    name = value.upper()
    try:
        return (
            signal.Signals(int(value))
            if value.isdigit()
            else signal.Signals[name if name.startswith("SIG") else f"SIG{name}"]
        )
    except (KeyError, ValueError):
        raise argparse.ArgumentTypeError(f"not a signal: {value!r}") from None


def _job_class(value: str) -> str:
    try:
        return _CLASS.validate_python(value)
    except ValidationError:
        raise argparse.ArgumentTypeError(
            f"not a job class: {value!r} (letters, digits, '._+-', at most 64)"
        ) from None


def _above_zero(value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {value!r}") from None
    if not number > 0:
        raise argparse.ArgumentTypeError(f"must be above 0: {value!r}")
    return number


def _count(value: str) -> int:
    if not value.isdigit() or int(value) < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number from 1: {value!r}")
    return int(value)


def _child_flags(parser: argparse.ArgumentParser) -> None:
    """The flags of how a node's process runs, which ``run`` and ``join`` share."""
    parser.add_argument(
        "--class",
        dest="job_class",
        type=_job_class,
        default="default",
        help="the kind of work, for learned speeds (default: default)",
    )
    parser.add_argument(
        "--window-s",
        type=_above_zero,
        default=60.0,
        help="one progress record per window (default 60)",
    )
    parser.add_argument(
        "--grace-s",
        type=_above_zero,
        default=10.0,
        help="after forwarding a stop signal, SIGKILL after this (default 10)",
    )
    parser.add_argument(
        "--on-degraded-signal",
        type=_signal,
        default=signal.SIGUSR1,
        help="signal to the job's handlers on a degraded event, or none",
    )
    parser.add_argument(
        "--master-addr", help="replace the placement's MASTER_ADDR (e.g. 127.0.0.1)"
    )


def _parser() -> _Parser:
    parser = _Parser(prog=PROG, description="Run jobs on GPUs that Fairlane places.")
    sub = parser.add_subparsers(dest="verb", required=True, parser_class=_Parser)
    run = sub.add_parser(
        "run",
        help="place a job, run COMMAND in it, release it",
        usage="fairlane run --gpus N [flags] -- COMMAND [ARG...]",
        epilog="Settings from the environment: FAIRLANE_SCHEDULER_URL, FAIRLANE_TOKEN(_FILE), "
        "KAFKA_BOOTSTRAP_SERVERS and FAIRLANE_KAFKA_* (docs/launcher.md).",
    )
    run.add_argument("--gpus", type=_count, required=True, help="GPUs per node")
    run.add_argument("--nodes", type=_count, default=1, help="nodes (more than 1: a gang)")
    run.add_argument("--job-id", help="idempotency key (default: CLASS-<random>)")
    run.add_argument("--namespace", help="default: the token's")
    run.add_argument("--models", help="allowed GPU models, comma-separated")
    run.add_argument("--min-gpu-memory-gib", type=_above_zero)
    run.add_argument(
        "--gpu-share",
        type=_above_zero,
        help="a share of one GPU's compute, 0 < share <= 1 (with --gpus 1): the job shares "
        "the GPU and runs with the limits the answer gives (docs/fractional.md)",
    )
    run.add_argument(
        "--gpu-memory-mib",
        type=_count,
        help="with --gpu-share: the GPU memory the share may use (default: its share)",
    )
    run.add_argument("--policy", choices=("fastest", "binpack", "spread"), default="fastest")
    run.add_argument("--priority", type=int, default=0)
    run.add_argument(
        "--lease-s",
        type=_above_zero,
        default=60.0,
        help="lease, renewed every third of it (default 60)",
    )
    run.add_argument(
        "--multi-host",
        action="store_true",
        help="start the rank-0 node's process only; print the `fairlane join` line each "
        "other node's host runs",
    )
    _child_flags(run)
    joins = sub.add_parser(
        "join",
        help="run one node of a placement that `fairlane run --multi-host` holds",
        usage="fairlane join PLACEMENT_ID [--node NAME] [flags] -- COMMAND [ARG...]",
    )
    joins.add_argument("placement_id", metavar="PLACEMENT_ID")
    joins.add_argument("--node", default=socket.gethostname(), help="default: this host's name")
    _child_flags(joins)
    return parser


def parse(argv: Sequence[str]) -> JobSpec | JoinSpec:
    """The verb's flags before ``--`` and the command after it, as a spec."""
    args = list(argv)
    split = args.index("--") if "--" in args else len(args)
    flags, command = args[:split], args[split + 1 :]
    ns = _parser().parse_args(flags)
    if not command:
        exit_with_error(PROG, f"no command to run: fairlane {ns.verb} [flags] -- COMMAND...")
    child: dict[str, Any] = {
        "command": command,
        "job_class": ns.job_class,
        "window_s": ns.window_s,
        "grace_s": ns.grace_s,
        "degraded_signal": ns.on_degraded_signal,
        "master_addr": ns.master_addr,
    }
    if ns.verb == "join":
        return JoinSpec(placement_id=ns.placement_id, node=ns.node, **child)
    models = [m.strip() for m in ns.models.split(",") if m.strip()] if ns.models else None
    request = PlacementRequest(
        job_id=ns.job_id or f"{ns.job_class}-{uuid.uuid4().hex[:12]}",
        namespace=ns.namespace,
        gpus_per_node=ns.gpus,
        nodes=ns.nodes,
        min_gpu_memory_gib=ns.min_gpu_memory_gib,
        models=models,
        policy=ns.policy,
        lease_s=ns.lease_s,
        priority=ns.priority,
        job_class=ns.job_class,
        gpu_share=ns.gpu_share,
        gpu_memory_mib=ns.gpu_memory_mib,
    )
    return JobSpec(request=request, multi_host=ns.multi_host, **child)


class _Lines(logging.Formatter):
    """``fairlane: message``, with ``warning: `` or ``error: `` before what needs a look."""

    def format(self, record: logging.LogRecord) -> str:
        level = "" if record.levelno < logging.WARNING else f"{record.levelname.lower()}: "
        return f"{PROG}: {level}{record.getMessage()}"


def main(argv: Sequence[str] | None = None) -> None:
    spec = parse(sys.argv[1:] if argv is None else argv)
    settings = load_settings(LauncherSettings, [], PROG)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_Lines())
    logging.basicConfig(level=logging.INFO, handlers=[handler])
    # Kafka's client logs every failed connection while Kafka is away, and httpx every
    # request: the launcher says once what matters (kafka_io, launcher).
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)
    logging.getLogger("httpx").setLevel(logging.WARNING)
    job = launch(settings, spec) if isinstance(spec, JobSpec) else join(settings, spec)
    raise SystemExit(asyncio.run(job))
