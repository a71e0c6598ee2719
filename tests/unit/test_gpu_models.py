import pytest

from fairlane_events.gpu_models import CATALOG, find_model


@pytest.mark.parametrize(
    ("nvml_name", "key"),
    [
        ("Tesla T4", "T4"),
        ("Tesla V100-SXM2-32GB", "V100"),
        ("NVIDIA A100-SXM4-40GB", "A100-40GB"),
        ("NVIDIA A100-SXM4-80GB", "A100-80GB"),
        ("NVIDIA A100 80GB PCIe", "A100-80GB"),
        ("NVIDIA L4", "L4"),
        ("NVIDIA L40S", "L40S"),
        ("NVIDIA H100 80GB HBM3", "H100"),
        ("NVIDIA H200", "H200"),
        ("NVIDIA B200", "B200"),
        ("H100", "H100"),
        ("Tesla K80", "K80"),
        ("Tesla P100-SXM2-16GB", "P100"),
        ("Tesla P100-PCIE-16GB", "P100"),
        ("K80", "K80"),
    ],
)
def test_nvml_names_map_to_catalogue_entries(nvml_name: str, key: str) -> None:
    spec = find_model(nvml_name)
    assert spec is not None
    assert spec.key == key


def test_unknown_model_is_none_not_an_error() -> None:
    assert find_model("NVIDIA GeForce RTX 4090") is None


def test_relative_speed_orders_generations() -> None:
    speed = {k: s.relative_speed for k, s in CATALOG.items()}
    assert speed["A100-40GB"] == pytest.approx(1.0)
    assert speed["T4"] < speed["V100"] < speed["A100-40GB"] < speed["H100"] < speed["B200"]
    assert speed["K80"] < speed["P100"] < speed["V100"]
