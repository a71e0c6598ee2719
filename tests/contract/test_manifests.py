"""The Kubernetes manifests in deploy/ and the Dockerfile carry the hardening that
docs/security.md promises: non-root, read-only root filesystem, no capabilities, the
RuntimeDefault seccomp profile, no service-account token (but the scheduler's, bound to
its own narrow ClusterRole: deploy/rbac.yaml), and NetworkPolicies that
admit only the control plane to the extender and let agents reach nothing but Kafka."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
WORKLOADS = ("Deployment", "DaemonSet", "StatefulSet", "Job")
KAFKA_PORTS = {9092, 9093}
DNS_PORT = 53
EXTENDER_PORT = 8081


def _resources() -> list[dict[str, Any]]:
    kustomization = yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())
    docs: list[dict[str, Any]] = []
    for name in kustomization["resources"]:
        docs.extend(d for d in yaml.safe_load_all((DEPLOY / name).read_text()) if d)
    return docs


RESOURCES = _resources()
PODS = {d["metadata"]["name"]: d for d in RESOURCES if d["kind"] in WORKLOADS}
POLICIES = {d["metadata"]["name"]: d["spec"] for d in RESOURCES if d["kind"] == "NetworkPolicy"}


def _pod_spec(workload: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = workload["spec"]["template"]["spec"]
    return spec


def _containers(workload: dict[str, Any]) -> list[dict[str, Any]]:
    spec = _pod_spec(workload)
    return [*spec.get("initContainers", []), *spec["containers"]]


def _labels(workload: dict[str, Any]) -> dict[str, str]:
    labels: dict[str, str] = workload["spec"]["template"]["metadata"]["labels"]
    return labels


def test_every_kind_of_workload_is_there() -> None:
    assert set(PODS) >= {"fairlane-scheduler", "fairlane-scorer", "fairlane-agent"}


@pytest.mark.parametrize("name", sorted(PODS))
def test_pods_run_non_root_under_runtime_default_seccomp_without_a_token(name: str) -> None:
    spec = _pod_spec(PODS[name])
    context = spec["securityContext"]
    assert context["runAsNonRoot"] is True
    assert context["runAsUser"] > 0
    assert context["seccompProfile"] == {"type": "RuntimeDefault"}
    if name == "fairlane-scheduler":  # the pod watch, bindings and device taints
        assert spec["automountServiceAccountToken"] is True
        assert spec["serviceAccountName"] == "fairlane-scheduler"
    else:
        assert spec["automountServiceAccountToken"] is False
    assert not spec.get("hostNetwork")
    assert not spec.get("hostPID")


@pytest.mark.parametrize("name", sorted(PODS))
def test_containers_have_a_read_only_root_and_no_capabilities(name: str) -> None:
    for container in _containers(PODS[name]):
        context = container["securityContext"]
        assert context["readOnlyRootFilesystem"] is True, container["name"]
        assert context["allowPrivilegeEscalation"] is False, container["name"]
        assert context["capabilities"] == {"drop": ["ALL"]}, container["name"]
        assert not context.get("privileged"), container["name"]


def test_the_image_runs_as_a_numeric_non_root_user() -> None:
    users = re.findall(r"^USER\s+(\S+)", (ROOT / "Dockerfile").read_text(), re.MULTILINE)
    uid = users[-1].split(":")[0]
    assert uid.isdigit()
    assert int(uid) > 0


def test_everything_is_denied_unless_a_policy_allows_it() -> None:
    deny = POLICIES["default-deny"]
    assert deny["podSelector"] == {}
    assert set(deny["policyTypes"]) == {"Ingress", "Egress"}
    assert "ingress" not in deny
    assert "egress" not in deny


@pytest.mark.parametrize("name", sorted(PODS))
def test_every_workload_has_its_own_policy(name: str) -> None:
    labels = _labels(PODS[name])
    mine = [
        p
        for p in POLICIES.values()
        if p["podSelector"].get("matchLabels")
        and p["podSelector"]["matchLabels"].items() <= labels.items()
    ]
    assert len(mine) == 1, name


def _policy_of(name: str) -> dict[str, Any]:
    policy: dict[str, Any]
    (policy,) = (
        p
        for p in POLICIES.values()
        if p["podSelector"].get("matchLabels") == {"app.kubernetes.io/name": name}
    )
    return policy


def _ports(rule: dict[str, Any]) -> set[int]:
    return {p["port"] for p in rule.get("ports", [])}


def test_only_the_control_plane_reaches_the_extender_port() -> None:
    rules = [r for r in _policy_of("fairlane-scheduler")["ingress"] if EXTENDER_PORT in _ports(r)]
    assert len(rules) == 1
    (rule,) = rules
    assert _ports(rule) == {EXTENDER_PORT}
    assert all(set(peer) == {"ipBlock"} for peer in rule["from"])  # no pod or namespace


def test_the_extender_listens_on_its_own_port_where_kube_scheduler_calls() -> None:
    (container,) = _containers(PODS["fairlane-scheduler"])
    env = {e["name"]: e.get("value") for e in container["env"]}
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert env["FAIRLANE_EXTENDER_PORT"] == str(ports["extender"]) == str(EXTENDER_PORT)
    config = yaml.safe_load((DEPLOY / "kube-scheduler" / "kube-scheduler-config.yaml").read_text())
    (extender,) = config["extenders"]
    assert f":{EXTENDER_PORT}/v1/extender" in extender["urlPrefix"]


def test_agents_reach_nothing_but_kafka_and_dns() -> None:
    policy = _policy_of("fairlane-agent")
    assert "Egress" in policy["policyTypes"]
    reached: set[int] = set()
    for rule in policy["egress"]:
        ports = _ports(rule)
        assert ports, "an egress rule without ports opens every port"
        if DNS_PORT in ports:
            assert ports == {DNS_PORT}
            assert all("ipBlock" not in peer for peer in rule["to"])  # the cluster DNS only
        reached |= ports
    assert reached == KAFKA_PORTS | {DNS_PORT}


def test_the_api_token_secret_is_mounted_read_only_for_rotation() -> None:
    workload = PODS["fairlane-scheduler"]
    (container,) = _containers(workload)
    env = {e["name"]: e.get("value") for e in container["env"]}
    (mount,) = (
        m for m in container["volumeMounts"] if m["mountPath"] == env["FAIRLANE_TOKENS_DIR"]
    )
    assert mount["readOnly"] is True
    (volume,) = (v for v in _pod_spec(workload)["volumes"] if v["name"] == mount["name"])
    assert volume["secret"]["secretName"] == "fairlane-api-tokens"
    # Group-readable through fsGroup: the files are root's, the process is uid 10001.
    assert _pod_spec(workload)["securityContext"]["fsGroup"] == 10001
    assert volume["secret"]["defaultMode"] & 0o007 == 0


def test_the_scheduler_shares_the_nodes_among_as_many_replicas_as_it_runs() -> None:
    """Each replica prefers its own share of the nodes (docs/scheduler.md); a share count
    other than the StatefulSet's replicas would leave shares unserved or doubled."""
    scheduler = PODS["fairlane-scheduler"]
    (container,) = (c for c in _containers(scheduler) if c["name"] == "scheduler")
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert int(env["FAIRLANE_REPLICAS"]) == scheduler["spec"]["replicas"]


def _copied(dockerfile_part: str) -> list[str]:
    """The sources of the COPY instructions (no --from) in part of the Dockerfile."""
    return [
        source
        for line in re.findall(r"^COPY\s+(?!--from)(.+)$", dockerfile_part, re.MULTILINE)
        for source in line.split()[:-1]
    ]


def test_the_image_build_copies_every_workspace_member() -> None:
    """uv refuses to sync a lock whose workspace members are missing: each member's
    pyproject.toml must be in the dependency layer, and its sources in the next."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    members = [
        path.relative_to(ROOT).as_posix()
        for pattern in pyproject["tool"]["uv"]["workspace"]["members"]
        for path in sorted(ROOT.glob(pattern))
        if (path / "pyproject.toml").is_file()
    ]
    build = (ROOT / "Dockerfile").read_text().split("FROM ${PYTHON_IMAGE} AS runtime")[0]
    dependencies, sources = build.split("--no-install-workspace", 1)
    copied_first, copied_next = _copied(dependencies), _copied(sources)
    for member in members:
        assert f"{member}/pyproject.toml" in copied_first, member
        assert any(member == s or member.startswith(f"{s}/") for s in copied_next), member
