"""What signs an agent's samples: its settings' key files, and fairlane-node-key."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from fairlane_agent.node_key import main as node_key_main
from fairlane_agent.settings import AgentSettings
from fairlane_events.signing import (
    KeyFileError,
    NodeKeySigner,
    RingSigner,
    parse_key_ring,
    parse_node_key,
    read_key_file,
    verify,
)
from tests.node_keys import TEST_KEY_RING


def _node_key(tmp_path: Path, node: str, capsys: pytest.CaptureFixture[str]) -> Path:
    node_key_main(["--key-ring", str(TEST_KEY_RING), "--node", node])
    path = tmp_path / "node-key"
    path.write_text(capsys.readouterr().out)
    return path


def test_fairlane_node_key_derives_a_key_the_scorer_s_ring_verifies(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _node_key(tmp_path, "gpu-7", capsys)
    signer = NodeKeySigner(read_key_file(path, parse_node_key))
    ring = read_key_file(TEST_KEY_RING, parse_key_ring)
    verify(ring, b"gpu-7", b"{}", signer.signature("gpu-7", b"gpu-7", b"{}"))


def test_fairlane_node_key_without_its_ring_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as stopped:
        node_key_main(["--key-ring", str(tmp_path / "absent"), "--node", "n"])
    assert stopped.value.code == 2
    assert "cannot read" in capsys.readouterr().err


def test_the_agent_signs_with_what_its_settings_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert AgentSettings(backend="sim").sample_signer() is None
    ring = AgentSettings(backend="sim", sample_key_ring_file=TEST_KEY_RING).sample_signer()
    assert isinstance(ring, RingSigner)
    own = _node_key(tmp_path, "gpu-7", capsys)
    node = AgentSettings(backend="nvml", node_name="gpu-7", node_key_file=own).sample_signer()
    assert isinstance(node, NodeKeySigner)
    with pytest.raises(KeyFileError, match="'gpu-7''s key, this node is 'gpu-8'"):
        AgentSettings(backend="nvml", node_name="gpu-8", node_key_file=own).sample_signer()


@pytest.mark.parametrize(
    "kwargs",
    [
        {"backend": "sim", "node_key_file": TEST_KEY_RING},  # one node's key, many nodes
        {"backend": "nvml", "node_key_file": TEST_KEY_RING, "sample_key_ring_file": TEST_KEY_RING},
    ],
)
def test_a_node_key_is_for_one_nvml_node_and_never_beside_a_ring(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        AgentSettings(**kwargs)  # type: ignore[arg-type]
