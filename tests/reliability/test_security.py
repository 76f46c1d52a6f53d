"""Security: lockstep leaves other schedulers' pods alone, never leaks claim parameters, and its
metrics and health endpoints show names and counts only."""

from __future__ import annotations

import re
import time
import uuid
from typing import Any

import orjson
from reliability_harness import (
    CLAIMS,
    DEVICE_CLASS,
    GROUP_LABEL,
    NAMESPACE,
    PODGROUPS,
    PODS,
    OperatorProcess,
    RunningCluster,
    bound,
    claim,
    create,
    create_group,
    http_get_text,
    pod,
    podgroup,
    unique,
    wait_until,
)

SECRET = f"s3cr3t-{uuid.uuid4().hex}"


def foreign_pod(name: str, group: str, scheduler: str | None) -> dict[str, Any]:
    body = pod(name, group)
    if scheduler is None:
        del body["spec"]["schedulerName"]
    else:
        body["spec"]["schedulerName"] = scheduler
    return body


def test_pods_of_other_schedulers_are_never_written(sim: RunningCluster, operator: OperatorProcess) -> None:
    group = unique("mixed")
    ours = [pod(f"{group}-ours-{i}", group) for i in range(2)]
    theirs = [
        foreign_pod(f"{group}-default", group, None),
        foreign_pod(f"{group}-kube", group, "default-scheduler"),
        foreign_pod(f"{group}-other", group, "lockstep-other"),
    ]
    create_group(sim, podgroup(group, 2), ours + theirs)
    versions = {
        body["metadata"]["name"]: sim.http.get(
            f"{PODS.format(ns=NAMESPACE)}/{body['metadata']['name']}"
        ).body["metadata"]["resourceVersion"]
        for body in theirs
    }
    # Proof the operator has looked at this group: its own members get bound.
    wait_until(lambda: bound(sim, group) >= 2, 20, 0.2, f"lockstep's own pods in {group} to bind")
    # A status write or event for the group's other members would land right after the binding.
    time.sleep(2)
    for name, version in versions.items():
        current = sim.http.get(f"{PODS.format(ns=NAMESPACE)}/{name}").body
        assert current["metadata"]["resourceVersion"] == version, f"lockstep wrote to {name}, not its pod"
        assert not current["spec"].get("nodeName"), f"lockstep bound {name}, not its pod"


def secret_claim(name: str, device_class: str) -> dict[str, Any]:
    body = claim(name, device_class)
    body["spec"]["devices"]["config"] = [
        {
            "requests": ["gpu"],
            "opaque": {"driver": DEVICE_CLASS, "parameters": {"token": SECRET, "nested": {"key": SECRET}}},
        }
    ]
    return body


def test_claim_opaque_parameters_never_reach_logs_events_or_metrics(
    sim: RunningCluster, operator: OperatorProcess
) -> None:
    granted = unique("secret-ok")
    create(sim, CLAIMS, secret_claim(f"{granted}-claim", DEVICE_CLASS))
    create_group(
        sim,
        podgroup(granted, 2),
        [pod(f"{granted}-{i}", granted, claim={"resourceClaimName": f"{granted}-claim"}) for i in range(2)],
    )
    refused = unique("secret-refused")
    create(sim, CLAIMS, secret_claim(f"{refused}-claim", "missing-class.example.com"))
    create_group(
        sim,
        podgroup(refused, 1),
        [pod(f"{refused}-0", refused, claim={"resourceClaimName": f"{refused}-claim"})],
    )
    wait_until(
        lambda: bound(sim, granted) == 2, 20, 0.2, f"gang {granted} with a parameterised claim to bind"
    )

    def refused_reported() -> bool:
        got = sim.http.get(f"{PODGROUPS.format(ns=NAMESPACE)}/{refused}").body
        return any(c.get("status") == "False" for c in (got.get("status") or {}).get("conditions") or [])

    wait_until(refused_reported, 30, 0.2, f"PodGroup {refused} to report its unsatisfiable claim")

    log_text = operator.log_path.read_text(errors="replace")
    assert log_text, "the operator logged nothing at debug level; the check would be vacuous"
    assert SECRET not in log_text, "claim opaque parameters leaked into the operator log"
    events = sim.http.get(f"/api/v1/namespaces/{NAMESPACE}/events")
    assert events.status == 200
    events_v1 = sim.http.get(f"/apis/events.k8s.io/v1/namespaces/{NAMESPACE}/events")
    for listing in (events.body, events_v1.body if events_v1.status == 200 else {}):
        assert SECRET not in orjson.dumps(listing).decode(), "claim opaque parameters leaked into an Event"
    groups = sim.http.get(PODGROUPS.format(ns=NAMESPACE)).body
    assert SECRET not in orjson.dumps(groups).decode(), (
        "claim opaque parameters leaked into a PodGroup status"
    )
    status, metrics = http_get_text(operator.metrics_url)
    assert status == 200, metrics
    assert SECRET not in metrics, "claim opaque parameters leaked into /metrics"


LABEL_VALUE = re.compile(r'="((?:[^"\\]|\\.)*)"')


def test_metrics_and_health_expose_no_object_data(sim: RunningCluster, operator: OperatorProcess) -> None:
    group = unique("private")
    marker = f"private-{uuid.uuid4().hex[:12]}"
    bodies = [pod(f"{group}-{i}", group) for i in range(2)]
    for body in bodies:
        body["metadata"]["annotations"] = {"team.example.com/note": marker}
        body["spec"]["containers"][0]["env"] = [{"name": "PASSWORD", "value": marker}]
    create_group(sim, podgroup(group, 2), bodies)
    wait_until(lambda: bound(sim, group) == 2, 20, 0.2, f"gang {group} to bind")

    uids = [
        item["metadata"]["uid"]
        for item in sim.http.get(
            PODS.format(ns=NAMESPACE), query={"labelSelector": f"{GROUP_LABEL}={group}"}
        ).body["items"]
    ]
    node_uids = [item["metadata"]["uid"] for item in sim.http.get("/api/v1/nodes").body["items"]]
    metrics_status, metrics = http_get_text(operator.metrics_url)
    health_status, health = http_get_text(operator.health_url)
    assert metrics_status == 200 and health_status == 200
    for text, endpoint in ((metrics, "/metrics"), (health, "/healthz")):
        assert marker not in text, f"{endpoint} shows pod annotations or env"
        for uid in uids + node_uids:
            assert uid not in text, f"{endpoint} shows object UID {uid}"
        assert "resourceVersion" not in text and "managedFields" not in text, (
            f"{endpoint} shows object bodies"
        )
    # Label values are names, counts' dimensions or enums: short, no structured object data.
    for value in LABEL_VALUE.findall(metrics):
        assert len(value) <= 253 and "{" not in value and "\n" not in value, (
            f"suspicious metric label {value!r}"
        )
