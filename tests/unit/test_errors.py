"""One error tree per package, all under FairlaneError, each drawn in its docstring;
one table maps the scheduler's to HTTP answers."""

import inspect
import re
from pathlib import Path
from types import ModuleType

import pytest

import fairlane_agent.errors
import fairlane_eval.errors
import fairlane_events.errors
import fairlane_runtime.errors
import fairlane_scheduler.errors
import fairlane_scorer.errors
import fairlane_sim.errors
from fairlane_events.errors import FairlaneError
from fairlane_scheduler.api.errors import HTTP_STATUS, error_responses
from fairlane_scheduler.errors import (
    AllocationConflictError,
    DatabaseTlsError,
    KubeApiError,
    MigrationError,
    PodError,
    QuotaBusyError,
    QuotaExceededError,
    QuotaNeverFitsError,
    SchedulerError,
    TokenFileError,
)

MODULES = [
    fairlane_events.errors,
    fairlane_sim.errors,
    fairlane_runtime.errors,
    fairlane_agent.errors,
    fairlane_scorer.errors,
    fairlane_scheduler.errors,
    fairlane_eval.errors,
]
ROOT = Path(__file__).resolve().parents[2]


def _own_errors(module: ModuleType) -> list[type[BaseException]]:
    return [
        c
        for _, c in inspect.getmembers(module, inspect.isclass)
        if issubclass(c, BaseException) and c.__module__ == module.__name__
    ]


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.__name__)
def test_every_error_is_in_the_tree_its_docstring_draws(module: ModuleType) -> None:
    errors = _own_errors(module)
    assert errors
    for error in errors:
        assert issubclass(error, FairlaneError), error
        assert error.__name__ in (module.__doc__ or ""), f"{error.__name__} not drawn"
        assert isinstance(error.retryable, bool)
        assert error.__name__ in module.__all__


def test_errors_that_stood_outside_any_tree_joined_one() -> None:
    from fairlane_agent.errors import NvmlUnavailableError
    from fairlane_events.codec import DecodeError
    from fairlane_sim.scenario import ScenarioError

    for error in (NvmlUnavailableError, MigrationError, PodError, ScenarioError, DecodeError):
        assert issubclass(error, FairlaneError)
        assert not error.retryable


_CLASS_NAMED_AS_ERROR = re.compile(r"^[ \t]*class[ \t]+(\w+(?:Error|Exception))\b", re.MULTILINE)


def test_no_error_class_is_defined_outside_an_errors_module() -> None:
    """New errors join their package's tree (two stood outside one again before this)."""
    strays = []
    sources = [*ROOT.glob("*/*/fairlane_*/**/*.py"), *ROOT.glob("eval/fairlane_eval/**/*.py")]
    for path in sorted(sources):
        if path.name == "errors.py":
            continue
        # A pattern, not ast.parse: CPython 3.11's AST constructor raises a spurious
        # "recursion depth mismatch" SystemError now and then in a threaded process
        # (python/cpython#106905), and failed `make test` once that way.
        for name in _CLASS_NAMED_AS_ERROR.findall(path.read_text()):
            strays.append(f"{path.relative_to(ROOT)}: {name}")
    assert strays == []


def test_every_scheduler_error_has_an_http_answer_or_says_why_not() -> None:
    not_http: set[type[FairlaneError]] = {SchedulerError, QuotaExceededError, PodError}
    not_http |= {AllocationConflictError}
    not_http |= {MigrationError, DatabaseTlsError, TokenFileError, KubeApiError}
    for error in _own_errors(fairlane_scheduler.errors):
        assert error in HTTP_STATUS or error in not_http, error
    # 429 and 503 answers say when to come back, and those errors say they are retryable.
    for error, (status, _) in HTTP_STATUS.items():
        assert error.retryable == (status in (429, 503) or error.__name__ == "NoCapacityError")


def test_quota_errors_split_by_whether_waiting_helps() -> None:
    busy = QuotaExceededError.of("over", ever=True)
    never = QuotaExceededError.of("too big", ever=False)
    assert isinstance(busy, QuotaBusyError)
    assert (busy.retryable, busy.ever, HTTP_STATUS[QuotaBusyError][0]) == (True, True, 429)
    assert isinstance(never, QuotaNeverFitsError)
    assert (never.retryable, never.ever, HTTP_STATUS[QuotaNeverFitsError][0]) == (
        False,
        False,
        403,
    )


def test_error_responses_document_each_status_once() -> None:
    from fairlane_scheduler.errors import ForbiddenError, NoCapacityError, NotReadyError

    responses = error_responses(ForbiddenError, QuotaNeverFitsError, NoCapacityError, NotReadyError)
    assert sorted(responses) == [403, 409, 503]
    assert responses[403]["description"] == "forbidden or quota_exceeded"
    assert "Retry-After" in responses[503]["headers"]
