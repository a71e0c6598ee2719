"""A steady placement load on the scheduler replicas, and the ledger of what it was told.

One thread places jobs round-robin over the replicas and releases the oldest when more
than ``live_target`` are held. A request the replica could not answer (killed, refused,
timed out) is sent again, same job id, to the next replica: the API is idempotent per
job id, so the retry returns the original placement if the first one was committed.
Every answer is written down; the audit later checks each one against Postgres.
"""

from __future__ import annotations

import collections
import itertools
import random
import threading
import time
from dataclasses import dataclass, field

import httpx

from tests.chaos.stack import MODELS, REPLICAS, UNPLACED_MODEL, ChaosStack

__all__ = ["Ledger", "LoadDriver", "outside_contract"]

_PLACEABLE = [m for m in MODELS if m != UNPLACED_MODEL]


@dataclass
class Ledger:
    """What the API answered. ``placed``: placement id -> (job id, GPUs asked for)."""

    placed: dict[str, tuple[str, int]] = field(default_factory=dict)
    released: set[str] = field(default_factory=set)
    outcomes: collections.Counter[str] = field(default_factory=collections.Counter)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def count(self, outcome: str) -> None:
        with self.lock:
            self.outcomes[outcome] += 1

    def snapshot(self) -> collections.Counter[str]:
        with self.lock:
            return collections.Counter(self.outcomes)


#: What the load may be answered under faults: placed or released, nothing to release,
#: no room (409), or come back later with Retry-After (429, 503); a replica that does
#: not answer at all is retried on the next.
_CONTRACT = ("200", "201", "202", "404", "409", "429+retry-after", "503+retry-after")


def outside_contract(outcome: str) -> bool:
    """Whether a ledger outcome ("POST 201", "POST 403", ...) is no answer the load may get
    (a refused token, a quota it never asked for, a 5xx, a 503 without Retry-After)."""
    _, answer, *_ = outcome.split()
    return answer not in (*_CONTRACT, "unanswered")


def _outcome(response: httpx.Response) -> str:
    code = response.status_code
    if code in (429, 503):
        return f"{code}+retry-after" if response.headers.get("Retry-After") else f"{code}-bare"
    if code == 409:
        try:
            return "409 " + str(response.json().get("error", "?"))
        except ValueError:
            return "409 (not JSON)"
    return str(code)


class LoadDriver:
    def __init__(self, stack: ChaosStack, *, rate_per_s: float, live_target: int) -> None:
        self._stack = stack
        self._pause_s = 1.0 / rate_per_s
        self._live_target = live_target
        self._rng = random.Random(20261201)
        self._replica = itertools.cycle(range(REPLICAS))
        self._live: collections.deque[str] = collections.deque()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="chaos-load", daemon=True)
        self._jobs = itertools.count()
        self.ledger = Ledger()

    def __enter__(self) -> LoadDriver:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=60)

    def _body(self) -> dict[str, object]:
        gang = self._rng.random() < 0.25
        return {
            "job_id": f"chaos-{next(self._jobs)}",
            "gpus_per_node": self._rng.choice((1, 2, 4, 8) if not gang else (4, 8)),
            "nodes": 2 if gang else 1,
            "models": _PLACEABLE,
            "policy": self._rng.choice(("fastest", "binpack", "spread")),
            "lease_s": 600,
        }

    def _send(
        self, client: httpx.Client, method: str, path: str, body: dict[str, object] | None
    ) -> httpx.Response | None:
        """Try each replica in turn; ``None`` when none answered."""
        for _ in range(REPLICAS):
            url = self._stack.api(next(self._replica)) + path
            try:
                return client.request(method, url, json=body, headers=self._stack.auth)
            except httpx.HTTPError as exc:
                self.ledger.count(f"{method} unanswered ({type(exc).__name__}), retried")
        return None

    def _place(self, client: httpx.Client) -> None:
        body = self._body()
        response = self._send(client, "POST", "/v1/placements", body)
        if response is None:
            self.ledger.count("POST unanswered by every replica")
            return
        outcome = _outcome(response)
        self.ledger.count(f"POST {outcome}")
        if response.status_code in (200, 201, 202):
            placement = response.json()
            gpus = int(str(body["gpus_per_node"])) * int(str(body["nodes"]))
            with self.ledger.lock:
                self.ledger.placed[placement["id"]] = (str(body["job_id"]), gpus)
            self._live.append(placement["id"])

    def _release(self, client: httpx.Client) -> None:
        pid = self._live[0]
        response = self._send(client, "DELETE", f"/v1/placements/{pid}", None)
        if response is None:
            self.ledger.count("DELETE unanswered by every replica")
            return
        self.ledger.count(f"DELETE {_outcome(response)}")
        if response.status_code in (200, 404):  # 404: nothing to hold on to
            self._live.popleft()
        if response.status_code == 200:
            with self.ledger.lock:
                self.ledger.released.add(pid)

    def _run(self) -> None:
        with httpx.Client(timeout=10) as client:
            while not self._stop.is_set():
                if len(self._live) >= self._live_target:
                    self._release(client)
                else:
                    self._place(client)
                time.sleep(self._pause_s)

    def held(self, before: collections.Counter[str]) -> str:
        """Answers since ``before``: the share that was a placement or a release."""
        now = self.ledger.snapshot()
        delta = {k: now[k] - before.get(k, 0) for k in now}
        served = sum(v for k, v in delta.items() if k.split()[1] in ("200", "201", "202"))
        total = sum(v for k, v in delta.items() if "retried" not in k)
        return f"{served}/{total} served" if total else "no requests"
