"""One row per scenario, and the table the suite prints (Markdown, for docs/reliability.md)."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["Row", "table"]


@dataclass
class Row:
    scenario: str
    injected: str = ""
    load: str = ""  # how much of the placement load was served meanwhile
    lost: str = ""  # samples / scores / placements lost
    duplicated: str = ""
    recovery: str = ""
    notes: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)  # broken guarantees: the run fails

    @property
    def ok(self) -> bool:
        return not self.failures

    def check(self, holds: bool, failure: str) -> None:
        if not holds:
            self.failures.append(failure)


_HEAD = ("scenario", "injected", "load held", "lost", "duplicated", "recovery", "result")


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def table(rows: list[Row]) -> str:
    lines = ["| " + " | ".join(_HEAD) + " |", "|" + "---|" * len(_HEAD)]
    for r in rows:
        verdict = "ok" if r.ok else "FAIL: " + "; ".join(r.failures)
        if r.notes:
            verdict += " (" + "; ".join(r.notes) + ")"
        cells = (r.scenario, r.injected, r.load, r.lost, r.duplicated, r.recovery, verdict)
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return "\n".join(lines)
