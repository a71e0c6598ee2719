"""The evaluator's exceptions, under the one root (``fairlane_events.errors``).

    FairlaneError
     +-- EvalError                                                     retryable
          +-- WorkloadError       a jobs file, trace or job that cannot     no
          |                       be used (where, which field)
          +-- ThroughputError     a throughput table that cannot be read,   no
          |                       or a question it cannot answer
          +-- VariabilityError    a variability file that cannot be used    no
          +-- ClusterError        a cluster description that cannot be      no
          |                       used (--cluster, node sizes)
          +-- OptionError         a command-line option that cannot apply   no
          |                       (unknown policy, a baseline not run...)
          +-- LiveError           the live run could not be carried out     no
                                  (a service did not start, the stack saw
                                  another fleet...): fix and rerun

The data, cluster and option errors are also ``ValueError``: bad input, which the CLI
reports as one line ``fairlane-eval: FILE:LINE: what is wrong`` and exit status 2.
"""

from __future__ import annotations

from fairlane_events.errors import FairlaneError

__all__ = [
    "ClusterError",
    "EvalError",
    "LiveError",
    "OptionError",
    "ThroughputError",
    "VariabilityError",
    "WorkloadError",
]


class EvalError(FairlaneError):
    """Root of the evaluator's errors."""


class WorkloadError(EvalError, ValueError):
    """A jobs file, trace or job that cannot be used; the message says where and which field."""


class ThroughputError(EvalError, ValueError):
    """A throughput table that cannot be read, or a question it cannot answer."""


class VariabilityError(EvalError, ValueError):
    """A variability file that cannot be used; the message says where and which field."""


class ClusterError(EvalError, ValueError):
    """A cluster description that cannot be used; the message says which entry and why."""


class OptionError(EvalError, ValueError):
    """A command-line option that cannot apply; the message names the option."""


class LiveError(EvalError):
    """The live run could not be carried out; the message says what."""
