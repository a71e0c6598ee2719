"""The demo job's hidden speeds, in both shapes of the speeds file (the simulated agent
writes the per-class one, ``"*"`` for every class it does not name)."""

import pytest

from fairlane.demo import hidden_speed

SPEEDS = {"G0": 0.5, "G1": {"llm": 0.7, "*": 0.9}, "G2": {"llm": 0.6}}


@pytest.mark.parametrize(
    ("uuid", "job_class", "speed"),
    [
        ("G0", "llm", 0.5),  # one speed for every class
        ("G1", "llm", 0.7),  # its class
        ("G1", "vision", 0.9),  # any other class
        ("G2", "vision", 1.0),  # no entry for the class, none for "*"
        ("G9", "llm", 1.0),  # a GPU the file does not name
    ],
)
def test_hidden_speed_by_gpu_and_class(uuid: str, job_class: str, speed: float) -> None:
    assert hidden_speed(SPEEDS, uuid, job_class) == speed


def test_a_speed_that_is_not_positive_is_refused() -> None:
    with pytest.raises(ValueError, match="speed of G0 must be a positive number"):
        hidden_speed({"G0": 0}, "G0", "llm")
