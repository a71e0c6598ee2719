"""``fairlane-node-key``: derive one node's signing key from the cluster key ring.

An operator runs it once per node (or a provisioning job does) and stores the line it
prints where only that node's agent reads it (``--node-key-file``): the agent then signs
for its own node and for no other (docs/security.md, "Node identity").
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from fairlane_events.signing import KeyFileError, NodeKey, parse_key_ring, read_key_file
from fairlane_runtime.entry import exit_with_error

__all__ = ["main"]

PROG = "fairlane-node-key"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.splitlines()[0])
    parser.add_argument("--key-ring", type=Path, required=True, help="the cluster key ring file")
    parser.add_argument("--node", required=True, help="the node's name, as its agent reports it")
    parser.add_argument("--key-id", help="the ring's secret to derive from (default: its first)")
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    args = _parser().parse_args(argv)
    try:
        ring = read_key_file(args.key_ring, parse_key_ring)
    except KeyFileError as exc:
        exit_with_error(PROG, exc)
    key_id = args.key_id or ring.current
    key = ring.node_key(args.node, key_id)
    if key is None:
        exit_with_error(PROG, f"{args.key_ring} has no key id {key_id!r}")
    sys.stdout.write(NodeKey(key_id, args.node, key).line())


if __name__ == "__main__":
    main()
