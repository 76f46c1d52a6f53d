"""Real ``kubectl apply`` of the rendered Helm chart and of ``examples/`` against lockstep's API emulator.

There is no helm binary here, so the chart is rendered with helm-python-sdk (Helm's Go SDK, the same
as ``helm template``) and the manifests are applied the way ``helm install`` would: CRDs first, then
the templates. The emulator serves the kinds lockstep itself talks to; the chart's workload kinds
(Deployment, RBAC, Service, PodDisruptionBudget, ...) are added to it as plain stored types, and a
minimal ServiceMonitor CRD stands in for the Prometheus Operator's.

The last test runs ``lockstep run`` with the environment the chart's Deployment gives it against
``lockstep sim`` and checks that every example ends in the phase its ``# lockstep-demo:`` line
expects.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import helm_python
import pytest
import yaml

from lockstep.demo import load_examples

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "lockstep"
EXAMPLES = REPO / "examples"
RELEASE_NAMESPACE = "lockstep-system"
KUBECTL = shutil.which("kubectl")
KUBECTL_TIMEOUT = 30.0

try:
    from lockstep.sim.apiserver import ApiServer
    from lockstep.sim.cluster import OWNER_KINDS
    from lockstep.sim.objectmeta import PlainStrategy
    from lockstep.sim.registry import OPTIONAL_CRDS
    from lockstep.sim.registry.core import POD_SMP_LISTS
    from lockstep.sim.resources import ResourceType
except (
    ImportError
) as exc:  # the emulator is written in parallel; until it imports there is nothing to apply to
    pytest.skip(f"lockstep.sim does not import yet: {exc}", allow_module_level=True)

# (group, version, plural, singular, kind, namespaced) of what the chart renders besides lockstep's own kinds.
CHART_KINDS = [
    ("", "v1", "serviceaccounts", "serviceaccount", "ServiceAccount", True),
    ("", "v1", "services", "service", "Service", True),
    ("apps", "v1", "deployments", "deployment", "Deployment", True),
    ("policy", "v1", "poddisruptionbudgets", "poddisruptionbudget", "PodDisruptionBudget", True),
    ("rbac.authorization.k8s.io", "v1", "clusterroles", "clusterrole", "ClusterRole", False),
    (
        "rbac.authorization.k8s.io",
        "v1",
        "clusterrolebindings",
        "clusterrolebinding",
        "ClusterRoleBinding",
        False,
    ),
    ("rbac.authorization.k8s.io", "v1", "roles", "role", "Role", True),
    ("rbac.authorization.k8s.io", "v1", "rolebindings", "rolebinding", "RoleBinding", True),
]
SERVICE_MONITOR_CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "servicemonitors.monitoring.coreos.com"},
    "spec": {
        "group": "monitoring.coreos.com",
        "scope": "Namespaced",
        "names": {"plural": "servicemonitors", "singular": "servicemonitor", "kind": "ServiceMonitor"},
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
                        },
                    }
                },
            }
        ],
    },
}
# Strategic-merge list keys (kubectl apply patches built-in kinds with SMP), as upstream's patchMergeKey tags.
SMP_LISTS: dict[str, dict[tuple[str, ...], str]] = {
    "Deployment": {
        ("spec", "template", *path): key for path, key in POD_SMP_LISTS.items() if path[0] == "spec"
    },
    "Service": {("spec", "ports"): "port"},
}
HA_VALUES: dict[str, Any] = {
    "replicaCount": 2,
    "featureGates": {"DRAListTypeAttributes": True},
    "namespaces": ["demo"],
    "metrics": {"serviceMonitor": {"enabled": True}},
}


class Emulator:
    """lockstep's API server emulator on its own event loop thread, with a kubeconfig for kubectl."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="emulator", daemon=True)
        self.server = ApiServer(host="127.0.0.1", port=0)
        for group, version, plural, singular, kind, namespaced in CHART_KINDS:
            if (group, version, plural) not in self.server.types:
                plain = ResourceType(
                    group,
                    version,
                    plural,
                    singular,
                    kind,
                    namespaced,
                    PlainStrategy(),
                    smp_lists=SMP_LISTS.get(kind, {}),
                )
                self.server._register(plain)
        self.kubeconfig = workdir / "kubeconfig"

    def start(self) -> None:
        self.thread.start()
        url = asyncio.run_coroutine_threadsafe(self.server.start(), self.loop).result(timeout=30)
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "sim", "cluster": {"server": url}}],
            "users": [{"name": "admin", "user": {}}],
            "contexts": [{"name": "sim", "context": {"cluster": "sim", "user": "admin"}}],
            "current-context": "sim",
        }
        self.kubeconfig.write_text(yaml.safe_dump(config))

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self.server.stop(), self.loop).result(timeout=30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)
        self.loop.close()

    def kubectl(
        self, *args: str, stdin: str | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        assert KUBECTL is not None
        command = [KUBECTL, f"--kubeconfig={self.kubeconfig}", f"--cache-dir={self.workdir / 'cache'}", *args]
        done = subprocess.run(
            command, input=stdin, capture_output=True, text=True, timeout=KUBECTL_TIMEOUT, check=False
        )
        if check and done.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} exited {done.returncode}:\n{done.stderr}")
        return done


@pytest.fixture(scope="module")
def emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Emulator]:
    if KUBECTL is None:
        pytest.skip("kubectl is not installed")
    running = Emulator(tmp_path_factory.mktemp("chart-apply"))
    running.start()
    try:
        yield running
    finally:
        running.stop()


def rendered(values: dict[str, Any]) -> str:
    manifests = helm_python.Chart.load(CHART).render(values, name="lockstep", namespace=RELEASE_NAMESPACE)
    return "\n---\n".join(text for name, text in sorted(manifests.items()) if not name.endswith("NOTES.txt"))


def applied(output: str) -> dict[str, str]:
    """``kind.group/name created|configured|unchanged`` lines of kubectl apply, as {object: action}."""
    result = {}
    for line in output.splitlines():
        target, _, action = line.rpartition(" ")
        result[target] = action
    return result


def test_helm_install_order_crds_then_templates_applies_cleanly(emulator: Emulator) -> None:
    emulator.kubectl("create", "namespace", RELEASE_NAMESPACE)
    crds = emulator.kubectl("apply", "-f", str(CHART / "crds"))
    assert applied(crds.stdout) == {
        "customresourcedefinition.apiextensions.k8s.io/podgroups.scheduling.lockstep.dev": "created"
    }
    emulator.kubectl("wait", "--for=condition=Established", "crd/podgroups.scheduling.lockstep.dev")

    first = emulator.kubectl("apply", "-f", "-", stdin=rendered({}))
    assert applied(first.stdout) == {
        "clusterrole.rbac.authorization.k8s.io/lockstep": "created",
        "clusterrolebinding.rbac.authorization.k8s.io/lockstep": "created",
        "deployment.apps/lockstep": "created",
        "service/lockstep-metrics": "created",
        "serviceaccount/lockstep": "created",
    }
    again = emulator.kubectl("apply", "-f", "-", stdin=rendered({}))
    assert set(applied(again.stdout).values()) == {"unchanged"}


def test_upgrade_to_ha_values_applies_the_new_objects(emulator: Emulator) -> None:
    emulator.kubectl("apply", "-f", "-", stdin=yaml.safe_dump(SERVICE_MONITOR_CRD))
    emulator.kubectl("wait", "--for=condition=Established", "crd/servicemonitors.monitoring.coreos.com")
    upgrade = applied(emulator.kubectl("apply", "-f", "-", stdin=rendered(HA_VALUES)).stdout)
    assert upgrade["deployment.apps/lockstep"] == "configured"
    for new in (
        "poddisruptionbudget.policy/lockstep",
        "role.rbac.authorization.k8s.io/lockstep-leader-election",
        "rolebinding.rbac.authorization.k8s.io/lockstep-leader-election",
        "servicemonitor.monitoring.coreos.com/lockstep",
    ):
        assert upgrade[new] == "created", upgrade
    deployment = json.loads(
        emulator.kubectl("get", "deployment", "lockstep", "-n", RELEASE_NAMESPACE, "-o", "json").stdout
    )
    [expected] = [
        doc for doc in yaml.safe_load_all(rendered(HA_VALUES)) if doc and doc["kind"] == "Deployment"
    ]
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert container["env"] == expected["spec"]["template"]["spec"]["containers"][0]["env"]
    env = {e["name"]: e["value"] for e in container["env"]}
    assert (env["LOCKSTEP_LEADER_ELECT"], env["LOCKSTEP_NAMESPACES"]) == ("true", "demo")
    assert deployment["spec"]["replicas"] == 2


def test_cluster_role_reads_back_as_rendered(emulator: Emulator) -> None:
    stored = json.loads(emulator.kubectl("get", "clusterrole", "lockstep", "-o", "json").stdout)
    [expected] = [doc for doc in yaml.safe_load_all(rendered({})) if doc and doc["kind"] == "ClusterRole"]
    assert stored["rules"] == expected["rules"]


def test_examples_apply_and_show_up_as_podgroups(emulator: Emulator) -> None:
    # the other schedulers' PodGroup CRDs and the workload operators' CRDs the examples need, applied
    # as a user would
    crds = [crd() for crd in OPTIONAL_CRDS.values()] + [crd_of() for crd_of, _ in OWNER_KINDS.values()]
    emulator.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(crds))
    for crd in crds:
        emulator.kubectl("wait", "--for=condition=Established", f"crd/{crd['metadata']['name']}")
    result = emulator.kubectl("apply", "-f", str(EXAMPLES))
    actions = applied(result.stdout)
    assert set(actions.values()) == {"created"}, result.stdout
    expected_objects = sum(
        1 for path in EXAMPLES.glob("*.yaml") for doc in yaml.safe_load_all(path.read_text()) if doc
    )
    assert len(actions) == expected_objects
    groups = emulator.kubectl(
        "get",
        "lpg",
        "-n",
        "demo",
        "-o",
        "custom-columns=NAME:.metadata.name,MIN:.spec.schedulingPolicy.gang.minCount",
    )
    rows = dict(line.split() for line in groups.stdout.splitlines()[1:])
    assert rows == {
        "allreduce": "4",
        "inference": "4",
        "misplaced": "4",
        "numa": "2",
        "pipeline": "3",
        "render": "2",
        "trainer": "8",
        "web": "<none>",
    }
    claims = emulator.kubectl("get", "resourceclaims,resourceclaimtemplates", "-n", "demo", "-o", "name")
    assert sorted(claims.stdout.split()) == [
        "resourceclaim.resource.k8s.io/shared-gpu",
        "resourceclaimtemplate.resource.k8s.io/numa-aligned-gpus",
        "resourceclaimtemplate.resource.k8s.io/two-gpus",
    ]


SIM_NODES = 10
SIM_DEVICES_PER_NODE = 8
PHASE_TIMEOUT = 60.0


def expected_phases() -> tuple[dict[str, str], set[str], set[str]]:
    """{lockstep PodGroup name: expected phase} of every example (those its Jobs', JobSets' and
    LeaderWorkerSets' pods make included; a gated Job's, not made yet, left out), the feature gates
    they need and the owner kinds whose gangs they need inferred. Other APIs' PodGroups are waited
    for by their condition or phase."""
    phases: dict[str, str] = {}
    gates: set[str] = set()
    infer: set[str] = set()
    for example in load_examples(EXAMPLES):
        if example.expect is None:
            continue
        gates.update(example.gates)
        infer.update(example.infer)
        others = {
            doc["metadata"]["name"]
            for doc in example.documents
            if doc.get("kind") == "PodGroup" and not doc["apiVersion"].startswith("scheduling.lockstep.dev/")
        }
        kueue = any(doc.get("kind") == "Pod" for doc in example.documents) and not any(
            doc.get("kind") == "PodGroup" for doc in example.documents
        )
        if example.expect == "Pending" or kueue:
            continue  # a gated Job's group is not made yet; a Kueue pod group has no PodGroup
        for _, name in example.podgroups:
            if name not in others:
                phases[name] = example.expect
    return phases, gates, infer


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def stop(process: subprocess.Popen[str]) -> int:
    process.send_signal(signal.SIGTERM)
    try:
        return process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()
        return process.wait(timeout=10)


@pytest.fixture(scope="module")
def sim_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """``lockstep sim`` as a user starts it; yields its kubeconfig."""
    if KUBECTL is None:
        pytest.skip("kubectl is not installed")
    kubeconfig = tmp_path_factory.mktemp("sim") / "kubeconfig"
    command = [sys.executable, "-m", "lockstep", "sim", "--nodes", str(SIM_NODES)]
    command += ["--devices-per-node", str(SIM_DEVICES_PER_NODE), "--kubeconfig", str(kubeconfig)]
    command += ["--install-crds", ",".join(OPTIONAL_CRDS)]
    _, gates, _ = expected_phases()  # the API server serves what the examples need, as the demo's does
    if gates:
        command += ["--feature-gates", ",".join(f"{gate}=true" for gate in sorted(gates))]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
    assert process.stdout is not None
    line = process.stdout.readline()
    if not line.startswith("export KUBECONFIG="):
        stop(process)
        raise AssertionError(
            f"lockstep sim did not start: {line!r}\n{process.stderr.read() if process.stderr else ''}"
        )
    try:
        yield kubeconfig
    finally:
        stop(process)


@pytest.mark.slow
def test_operator_configured_by_the_chart_brings_every_example_to_its_expected_phase(
    sim_cluster: Path, tmp_path: Path, wait_until_healthy: Callable[[subprocess.Popen[str], int], None]
) -> None:
    phases, gates, infer = expected_phases()
    values = {
        "featureGates": dict.fromkeys(gates, True),
        "namespaces": ["demo"],
        "scheduling": {"inferGangs": sorted(infer)},
    }
    [deployment] = [d for d in yaml.safe_load_all(rendered(values)) if d and d["kind"] == "Deployment"]
    env = {e["name"]: e["value"] for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]}
    health_port = free_port()
    # Outside a pod: credentials from the simulator's kubeconfig, probes on loopback ports that are free.
    env |= {
        "LOCKSTEP_KUBECONFIG": str(sim_cluster),
        "LOCKSTEP_HEALTH_BIND_ADDRESS": f"127.0.0.1:{health_port}",
        "LOCKSTEP_METRICS_BIND_ADDRESS": f"127.0.0.1:{free_port()}",
    }
    base_env = {k: v for k, v in os.environ.items() if not k.startswith("LOCKSTEP_")}
    log = (tmp_path / "operator.log").open("w")
    operator = subprocess.Popen(
        [sys.executable, "-m", "lockstep", "run"],
        env=base_env | env,
        stdout=log,
        stderr=log,
        text=True,
        cwd=REPO,
    )
    kubectl = [KUBECTL or "kubectl", f"--kubeconfig={sim_cluster}", f"--cache-dir={tmp_path / 'cache'}"]
    try:
        wait_until_healthy(operator, health_port)
        subprocess.run([*kubectl, "apply", "-f", str(EXAMPLES)], check=True, capture_output=True, timeout=30)
        reached: dict[str, str] = {}
        deadline = time.monotonic() + PHASE_TIMEOUT
        while reached != phases and time.monotonic() < deadline:
            time.sleep(0.5)
            listed = subprocess.run(
                [*kubectl, "get", "lpg", "-n", "demo", "-o", "json"],
                capture_output=True,
                text=True,
                timeout=30,
            )
            items = json.loads(listed.stdout)["items"] if listed.returncode == 0 else []
            reached = {i["metadata"]["name"]: i.get("status", {}).get("phase", "") for i in items}
        assert reached == phases, (tmp_path / "operator.log").read_text()[-4000:]
        # The commands NOTES.txt and the user guide give for waiting on a group.
        waits = (
            ("lpg/trainer", "PodGroupScheduled"),
            ("lpg/misplaced", "PodGroupScheduled=False"),
            ("podgroups.scheduling.k8s.io/upstream-gang", "PodGroupInitiallyScheduled"),
            ("podgroups.scheduling.volcano.sh/volcano-mpi", "Scheduled"),
        )
        for name, condition in waits:
            waited = subprocess.run(
                [
                    *kubectl,
                    "wait",
                    name,
                    "-n",
                    "demo",
                    f"--for=condition={condition}",
                    "--timeout=10s",
                ],
                capture_output=True,
                text=True,
                timeout=30,
            )
            assert waited.returncode == 0, waited.stderr
        # other schedulers' PodGroups reach the phase their shape calls Running
        dialect_groups = (
            "podgroups.scheduling.x-k8s.io/cosched-nginx",
            "podgroups.scheduling.volcano.sh/volcano-mpi",
        )
        for name in dialect_groups:
            running = "--for=jsonpath={.status.phase}=Running"
            waited = subprocess.run(
                [*kubectl, "wait", name, "-n", "demo", running, "--timeout=20s"],
                capture_output=True,
                text=True,
                timeout=40,
            )
            assert waited.returncode == 0, waited.stderr
    finally:
        stop(operator)
        log.close()
