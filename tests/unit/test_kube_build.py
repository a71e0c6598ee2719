"""The Kubernetes tests' control plane is built when its cache is empty, before the first
test and outside any test's timeout, and says in one line why it cannot be (issue 28: a
fresh machine's `make test` errored in every Kubernetes test while CI, which built it in
a step of its own, stayed green)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.kube import ControlPlaneBuildError, build_control_plane
from tests.processes import free_port
from tests.servers import ROOT

BINARIES = ("etcd", "kube-apiserver", "kube-scheduler")


def _empty_cache_and_refusing_proxy(tmp_path: Path) -> dict[str, str]:
    """No cached binaries and no cached modules; a proxy address nothing listens on."""
    return {
        "FAIRLANE_K8S_CACHE": str(tmp_path / "k8s"),
        "GOMODCACHE": str(tmp_path / "gomod"),
        "GOPROXY": f"http://127.0.0.1:{free_port()}",
        "GOFLAGS": "-modcacherw",
        "GOTOOLCHAIN": "local",
    }


def _path_without_go(tmp_path: Path) -> str:
    """A PATH with just what scripts/k8s.sh needs before it looks for go."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("bash", "dirname"):
        found = shutil.which(tool)
        assert found is not None, tool
        (bin_dir / tool).symlink_to(found)
    return str(bin_dir)


def test_an_empty_cache_is_built_and_a_proxy_that_refuses_is_named_in_one_line(
    tmp_path: Path,
) -> None:
    env = _empty_cache_and_refusing_proxy(tmp_path)
    with pytest.raises(ControlPlaneBuildError) as refused:
        build_control_plane(env)
    message = str(refused.value)
    assert message.startswith("cannot download k8s.io/kubernetes@"), message
    assert f"Go module proxy {env['GOPROXY']}" in message
    assert "connection refused" in message
    assert "\n" not in message


def test_without_go_an_empty_cache_says_so_in_one_line(tmp_path: Path) -> None:
    env = {"FAIRLANE_K8S_CACHE": str(tmp_path / "k8s"), "PATH": _path_without_go(tmp_path)}
    with pytest.raises(ControlPlaneBuildError, match=r"^go not found: Go >= 1\.26 builds"):
        build_control_plane(env)


def test_cached_binaries_are_used_without_go(tmp_path: Path) -> None:
    cache = tmp_path / "k8s"
    (cache / "bin").mkdir(parents=True)
    for name in BINARIES:
        binary = cache / "bin" / name
        binary.write_text("#!/bin/sh\n")
        binary.chmod(0o755)
    build_control_plane({"FAIRLANE_K8S_CACHE": str(cache), "PATH": _path_without_go(tmp_path)})


def test_a_session_with_a_kubernetes_test_builds_before_its_first_test(tmp_path: Path) -> None:
    """The session stops at collection with the build's reason: no test starts (and so
    none starts servers or times out waiting for a build)."""
    env = {**os.environ, **_empty_cache_and_refusing_proxy(tmp_path)}
    session = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "tests/integration/test_k8s_extender.py",
            "-p",
            "no:cacheprovider",
            "-q",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=240,
    )
    output = session.stdout + session.stderr
    assert session.returncode == 2, output
    assert "the Kubernetes tests cannot run: cannot download k8s.io/kubernetes@" in output
    assert "building the Kubernetes control plane once" in output  # the progress line
    assert " passed" not in output, output
    assert " error" not in output, output
