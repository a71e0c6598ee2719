"""The agent's entry point: backend choice and its failure messages (fake pynvml)."""

from __future__ import annotations

import pynvml
import pytest

from fairlane_agent.__main__ import main
from tests.fakes.nvml import FakeNvml, v100

NO_KAFKA = ["--kafka-bootstrap-servers", "127.0.0.1:1", "--metrics-port", "0"]


def no_driver() -> FakeNvml:
    return FakeNvml([v100()], init_error=pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)


def test_backend_nvml_without_nvml_is_one_clear_line_and_exit_code_2(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--backend", "nvml", *NO_KAFKA], load_nvml=no_driver)
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err == "fairlane-agent: error: NVML could not start: NVML Shared Library Not Found\n"


def test_backend_auto_without_nvml_falls_back_to_the_simulator(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--backend", "auto", *NO_KAFKA], load_nvml=no_driver)
    # It got past NVML to Kafka, which is absent here on purpose.
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "--backend auto falls back to the simulated fleet" in err
    assert "fairlane-agent: error: Kafka is not reachable at 127.0.0.1:1" in err


def test_backend_sim_never_touches_nvml() -> None:
    nvml = FakeNvml([v100()])
    with pytest.raises(SystemExit):
        main(["--backend", "sim", *NO_KAFKA], load_nvml=lambda: nvml)
    assert not nvml.calls


def test_backend_dcgm_without_a_url_is_one_clear_line_and_exit_code_2(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--backend", "dcgm", *NO_KAFKA])
    assert exited.value.code == 2
    assert capsys.readouterr().err == (
        "fairlane-agent: error: invalid settings: --backend dcgm needs "
        "--dcgm-url (a dcgm-exporter /metrics URL)\n"
    )


def test_backend_dcgm_never_touches_nvml() -> None:
    nvml = FakeNvml([v100()])
    with pytest.raises(SystemExit):
        main(
            ["--backend", "dcgm", "--dcgm-url", "http://127.0.0.1:1/metrics", *NO_KAFKA],
            load_nvml=lambda: nvml,
        )
    assert not nvml.calls
