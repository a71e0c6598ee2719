"""A test run writes nothing into the repository's tracked files: a fresh clone is clean
after ``make test`` (issue 35). Tests write under their ``tmp_path`` or a git-ignored
folder (``.local/``); the dashboard's picture for the docs is written only when asked.

The scan is a guard, not a proof: it finds the shape of the old fault (a write call whose
path is built from the repository root or names ``docs/``) in every test module."""

import ast
from pathlib import Path

from tests.e2e.test_dashboard_browser import screenshot_path

ROOT = Path(__file__).resolve().parents[2]
_WRITES = {"write_text", "write_bytes", "screenshot", "savefig", "touch", "mkdir", "open"}


def _is_write(call: ast.Call) -> bool:
    func = call.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
    if name != "open":
        return name in _WRITES
    modes = [*call.args[1:2], *(k.value for k in call.keywords if k.arg == "mode")]
    return any(isinstance(m, ast.Constant) and set(str(m.value)) & set("wax+") for m in modes)


def _names_the_tree(node: ast.AST) -> bool:
    return any(
        (isinstance(n, ast.Name) and n.id == "ROOT")
        or (isinstance(n, ast.Constant) and str(n.value).startswith("docs/"))
        for n in ast.walk(node)
    )


def test_the_dashboard_screenshot_goes_under_tmp_path_unless_asked(tmp_path: Path) -> None:
    assert screenshot_path(tmp_path, {}).parent == tmp_path
    assert screenshot_path(tmp_path, {"FAIRLANE_DASHBOARD_SCREENSHOT": ""}).parent == tmp_path
    asked = {"FAIRLANE_DASHBOARD_SCREENSHOT": "docs/dashboard.png"}
    assert screenshot_path(tmp_path, asked) == Path("docs/dashboard.png")


def test_no_test_writes_to_a_path_in_the_repository() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{call.lineno}"
        for path in sorted((ROOT / "tests").rglob("*.py"))
        for call in ast.walk(ast.parse(path.read_text()))
        if isinstance(call, ast.Call) and _is_write(call) and _names_the_tree(call)
    ]
    assert found == [], "write under tmp_path or .local/ instead"
