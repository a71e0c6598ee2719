"""The policies compared: what each may see of the fleet, and how it chooses.

Every policy decides with the scheduler's own core (``fairlane_scheduler.core.placement
.choose``); they differ only in the fleet view they are given and the packing rule:

- ``constant``: every GPU worth 1.0 (static allocation);
- ``scores``: Fairlane's live scores, threshold and stabilization window;
- ``truth``: every GPU's true current speed, on the score's scale (at most 1.0: a GPU
  faster than its model's median is as good as a healthy one), so that the oracle differs
  from Fairlane only in what it knows, not in how it packs.

With equal scores ``choose`` falls back to its tie-breaks, which make the static policies
what their names say: ``fastest`` with an exact capacity ranking on a constant view is
first fit (node name, then GPU index), ``spread`` is Kubernetes' default least-allocated
scoring, ``binpack`` is most-allocated. A constant view still knows each GPU's model: its
effective capacity is 1.0 x the catalogue's speed of the model, so on a mixed fleet
``static`` takes the catalogue's fastest model first and is first fit among equals (as
the live baseline does, docs/evaluation-live.md); ``spread`` and ``binpack`` prefer the
faster model only after their own key.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from fairlane_scheduler.core.placement import Packing

__all__ = ["LEARNING_POLICIES", "ORACLE", "ORACLES", "POLICIES", "PolicySpec", "View", "policy"]

View = Literal["constant", "scores", "truth"]


@dataclass(frozen=True)
class PolicySpec:
    name: str
    view: View
    pack: Packing
    job_speeds: bool = False  # rank by the job's measured per-model throughput
    description: str = ""
    exact_ranking: bool = False  # fastest without the capacity resolution (first fit)
    per_class: bool = False  # choose in the job class's view (learned or true class speed)
    cross_job: bool = False  # the learner learns across jobs of a class too

    @property
    def learns(self) -> bool:
        """Whether the policy learns speeds from running jobs' reports."""
        return self.per_class and self.view == "scores"


POLICIES: tuple[PolicySpec, ...] = (
    PolicySpec(
        "static",
        "constant",
        "fastest",
        description="every GPU 1.0, the catalogue's fastest model, then first fit",
        exact_ranking=True,
    ),
    PolicySpec(
        "k8s-least-allocated", "constant", "spread", description="every GPU 1.0, least allocated"
    ),
    PolicySpec("static-binpack", "constant", "binpack", description="every GPU 1.0, binpack"),
    PolicySpec("fairlane-fastest", "scores", "fastest", description="live scores, fastest"),
    PolicySpec("fairlane-binpack", "scores", "binpack", description="live scores, binpack"),
    PolicySpec("fairlane-spread", "scores", "spread", description="live scores, spread"),
    PolicySpec(
        "fairlane-hetero",
        "scores",
        "fastest",
        job_speeds=True,
        description="live scores x the job's measured speed per model",
    ),
    *(
        PolicySpec(
            f"oracle-{pack}",
            "truth",
            pack,
            job_speeds=True,
            description=f"true current speeds, {pack}",
        )
        for pack in ("fastest", "binpack", "spread")
    ),
)

LEARNING_POLICIES: tuple[PolicySpec, ...] = (
    PolicySpec(
        "fairlane-learned",
        "scores",
        "fastest",
        description="live scores x the speed learned from jobs' reports, per class",
        per_class=True,
    ),
    PolicySpec(
        "fairlane-learned-across",
        "scores",
        "fastest",
        description="fairlane-learned, its learner learning across jobs of a class too",
        per_class=True,
        cross_job=True,
    ),
    PolicySpec(
        "oracle-learned",
        "truth",
        "fastest",
        job_speeds=True,
        description="true current speeds x true class factors, fastest",
        per_class=True,
    ),
)

#: The oracle of a trial: the best of the oracle policies (each packs as one Fairlane
#: policy does). Greedy placement with perfect knowledge is not an upper bound on its
#: own: how a policy packs changes the queue more than a slow GPU changes a job.
ORACLE = "oracle"
ORACLES = tuple(p.name for p in POLICIES if p.view == "truth")


def policy(name: str) -> PolicySpec:
    for spec in (*POLICIES, *LEARNING_POLICIES):
        if spec.name == name:
            return spec
    known = ", ".join(p.name for p in (*POLICIES, *LEARNING_POLICIES))
    raise ValueError(f"unknown policy {name!r}; known: {known}")
