"""What every service's ``main()`` does first: build its settings from flags and
environment, and turn a start-up failure into one clear line instead of a traceback."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import NoReturn, TypeVar

from pydantic import ValidationError
from pydantic_settings import BaseSettings

__all__ = ["exit_with_error", "load_settings"]

S = TypeVar("S", bound=BaseSettings)


def exit_with_error(prog: str, message: object, code: int = 2) -> NoReturn:
    print(f"{prog}: error: {message}", file=sys.stderr)
    raise SystemExit(code)


def load_settings(cls: type[S], argv: Sequence[str] | None, prog: str) -> S:
    """``cls`` from ``--flags`` (kebab-case) over ``FAIRLANE_*`` environment variables."""
    try:
        return cls(
            _cli_parse_args=list(sys.argv[1:] if argv is None else argv),
            _cli_prog_name=prog,
            _cli_kebab_case=True,
            _cli_implicit_flags=True,
        )
    except ValidationError as exc:
        problems = "; ".join(_problem(e["loc"], e["msg"]) for e in exc.errors())
        exit_with_error(prog, f"invalid settings: {problems}")


def _problem(loc: tuple[int | str, ...], msg: str) -> str:
    """``field: message``; a check across fields (a model validator) has no field."""
    msg = msg.removeprefix("Value error, ")
    return f"{'.'.join(str(p) for p in loc)}: {msg}" if loc else msg
