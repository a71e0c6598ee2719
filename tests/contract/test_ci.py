"""CI runs what the README tells a new user to run, and nothing that would hide a
missing step (issue 28: CI built the Kubernetes control plane in a step of its own, so
it stayed green while a fresh machine's `make test` errored)."""

from __future__ import annotations

import re

from tests.servers import ROOT


def _commands(script: str) -> list[str]:
    lines = (line.strip() for line in script.splitlines())
    return [line for line in lines if line and not line.startswith("#")]


def test_ci_runs_the_readme_commands_and_nothing_else() -> None:
    readme_commands = re.findall(r"^(make \w+)\s+#", (ROOT / "README.md").read_text(), re.M)
    assert "make test" in readme_commands
    commands = _commands((ROOT / ".ci/run").read_text())
    steps = [c for c in commands if not c.startswith(("set ", "cd ", "started=", "echo "))]
    assert steps == ["make lint", "make test"], steps
