"""Accepted but unsatisfiable input against the running operator: every such group ends with a clear
status, the operator never crashes (the ``operator`` fixture fails if it exits), poison groups never
block a feasible gang, and nothing is lost once the missing piece appears."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
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
    members,
    pod,
    podgroup,
    unique,
    wait_until,
)

from lockstep.sim.invariants import check_state

TEMPLATES = "/apis/resource.k8s.io/v1/namespaces/{ns}/resourceclaimtemplates"
PROMPT_SECONDS = 20
STATUS_SECONDS = 30


def scheduled_condition(sim: RunningCluster, group: str) -> dict[str, Any] | None:
    got = sim.http.get(f"{PODGROUPS.format(ns=NAMESPACE)}/{group}")
    if got.status != 200:
        return None
    for condition in (got.body.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "PodGroupScheduled":
            return dict(condition)
    return None


def explanation(sim: RunningCluster, group: str) -> str:
    """Everything a user reads to learn why a group is not scheduled: PodGroup conditions and reasons,
    and its pods' PodScheduled conditions."""
    parts: list[str] = []
    got = sim.http.get(f"{PODGROUPS.format(ns=NAMESPACE)}/{group}")
    if got.status == 200:
        status = got.body.get("status") or {}
        parts += [f"{c.get('reason')}: {c.get('message')}" for c in status.get("conditions") or []]
        parts += [f"{r.get('reason')}: {r.get('message')}" for r in status.get("unschedulableReasons") or []]
    for member in members(sim, group):
        for condition in (member.get("status") or {}).get("conditions") or []:
            if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
                parts.append(f"{condition.get('reason')}: {condition.get('message')}")
    return "\n".join(parts)


def assert_clearly_unschedulable(sim: RunningCluster, group: str, must_mention: str | None = None) -> None:
    def clear() -> bool:
        condition = scheduled_condition(sim, group)
        if condition is None or condition.get("status") != "False" or not condition.get("reason"):
            return False
        return must_mention is None or must_mention in explanation(sim, group)

    wait_until(clear, STATUS_SECONDS, 0.2, f"PodGroup {group} to say why it is not scheduled")
    assert bound(sim, group) == 0, f"unsatisfiable group {group} has members bound"


def test_poison_groups_get_a_clear_condition_and_do_not_block_a_feasible_gang(
    sim: RunningCluster, operator: OperatorProcess
) -> None:
    poison: list[tuple[str, str | None]] = []
    for _ in range(4):  # fewer pods than minCount
        name = unique("too-few")
        create_group(sim, podgroup(name, 10), [pod(f"{name}-{i}", name) for i in range(2)])
        poison.append((name, None))
    for _ in range(4):  # a member bigger than any node
        name = unique("huge")
        create_group(sim, podgroup(name, 2), [pod(f"{name}-{i}", name, cpu="1000") for i in range(2)])
        poison.append((name, None))
    for _ in range(4):  # a node selector no node matches
        name = unique("nowhere")
        create_group(
            sim,
            podgroup(name, 2),
            [pod(f"{name}-{i}", name, node_selector={"no": "such-node"}) for i in range(2)],
        )
        poison.append((name, None))
    for _ in range(4):  # a claim whose DeviceClass does not exist
        name = unique("no-class")
        create(sim, CLAIMS, claim(f"{name}-claim", "no-such-class.example.com"))
        create_group(
            sim,
            podgroup(name, 2),
            [pod(f"{name}-{i}", name, claim={"resourceClaimName": f"{name}-claim"}) for i in range(2)],
        )
        poison.append((name, "no-such-class.example.com"))
    for _ in range(4):  # pods referencing a claim that does not exist
        name = unique("no-claim")
        create_group(
            sim,
            podgroup(name, 2),
            [pod(f"{name}-{i}", name, claim={"resourceClaimName": f"{name}-gone"}) for i in range(2)],
        )
        poison.append((name, f"{name}-gone"))

    feasible = unique("feasible")
    create_group(sim, podgroup(feasible, 4), [pod(f"{feasible}-{i}", feasible) for i in range(4)])
    wait_until(
        lambda: bound(sim, feasible) == 4,
        PROMPT_SECONDS,
        0.2,
        f"feasible gang {feasible} to bind past 20 poison groups",
    )

    for name, mention in poison:
        assert_clearly_unschedulable(sim, name, mention)
    assert [v for v in check_state(sim.state()) if not v.transient] == []


def test_pods_of_a_podgroup_that_appears_late_are_not_lost(
    sim: RunningCluster, operator: OperatorProcess
) -> None:
    name = unique("late")
    create_group(sim, None, [pod(f"{name}-{i}", name) for i in range(3)])
    wait_until(lambda: len(members(sim, name)) == 3, 5, what="pods to be stored")
    assert bound(sim, name) == 0, "pods of a PodGroup that does not exist were bound"
    create(sim, PODGROUPS, podgroup(name, 3))
    wait_until(
        lambda: bound(sim, name) == 3, PROMPT_SECONDS, 0.2, f"gang {name} to bind once its PodGroup exists"
    )


def test_template_that_never_materialises_is_reported_and_recovers_when_created(
    sim: RunningCluster, operator: OperatorProcess
) -> None:
    name = unique("no-template")
    template = f"{name}-template"
    create_group(
        sim,
        podgroup(name, 2, [{"name": "gpus", "resourceClaimTemplateName": template}]),
        [pod(f"{name}-{i}", name) for i in range(2)],
    )
    assert_clearly_unschedulable(sim, name, template)
    create(
        sim,
        TEMPLATES,
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaimTemplate",
            "metadata": {"name": template},
            "spec": {
                "spec": {
                    "devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": DEVICE_CLASS}}]}
                }
            },
        },
    )
    wait_until(
        lambda: bound(sim, name) == 2, PROMPT_SECONDS, 0.2, f"gang {name} to bind once its template exists"
    )


def test_podgroup_deleted_while_its_pods_bind_loses_nothing(
    sim: RunningCluster, operator: OperatorProcess
) -> None:
    name = unique("vanishing")
    create_group(sim, podgroup(name, 6), [pod(f"{name}-{i}", name) for i in range(6)])
    assert sim.http.delete(f"{PODGROUPS.format(ns=NAMESPACE)}/{name}").status == 200

    def settled() -> bool:
        pods = members(sim, name)
        count = sum(1 for p in pods if p["spec"].get("nodeName"))
        explained = all(
            p["spec"].get("nodeName")
            or any(
                c.get("type") == "PodScheduled" and c.get("status") == "False" and c.get("message")
                for c in (p.get("status") or {}).get("conditions") or []
            )
            for p in pods
        )
        return len(pods) == 6 and count in (0, 6) and explained

    wait_until(
        settled, STATUS_SECONDS, 0.2, f"the pods of deleted PodGroup {name} to be all bound or all explained"
    )
    if all(p["spec"].get("nodeName") for p in members(sim, name)):
        # Bound before the deletion took: its finalizer keeps the PodGroup while they run.
        held = sim.http.get(f"{PODGROUPS.format(ns=NAMESPACE)}/{name}")
        assert held.status == 200 and held.body["metadata"].get("deletionTimestamp"), held
        return
    wait_until(
        lambda: sim.http.get(f"{PODGROUPS.format(ns=NAMESPACE)}/{name}").status == 404,
        PROMPT_SECONDS,
        0.2,
        f"deleted PodGroup {name}, none of whose pods is bound, to go",
    )
    create(sim, PODGROUPS, podgroup(name, 6))
    wait_until(
        lambda: bound(sim, name) == 6, PROMPT_SECONDS, 0.2, f"gang {name} to bind once its PodGroup is back"
    )


QUANTITY_TEXT = st.sampled_from(
    ["1", "0", "0.5", "100m", "1e3", "1Ki", "1.5Gi", "9999Pi", "-1", "1..2", "ten", "", "0x10", "1e400"]
)
RESOURCE_NAMES = st.sampled_from(
    ["cpu", "memory", "ephemeral-storage", "pods", "hugepages-2Mi", "example.com/widget", "a/b/c", "CPU"]
)
RANDOM_CONTAINERS = st.lists(
    st.fixed_dictionaries(
        {"name": st.from_regex(r"\A[a-z]{1,8}\Z"), "image": st.just("pause")},
        optional={
            "resources": st.fixed_dictionaries(
                {},
                optional={
                    "requests": st.dictionaries(RESOURCE_NAMES, QUANTITY_TEXT, max_size=3),
                    "limits": st.dictionaries(RESOURCE_NAMES, QUANTITY_TEXT, max_size=3),
                },
            ),
            "restartPolicy": st.sampled_from(["Always", "Never"]),
        },
    ),
    max_size=3,
)
RANDOM_POD_SPECS = st.fixed_dictionaries(
    {"schedulerName": st.just("lockstep"), "containers": RANDOM_CONTAINERS.filter(bool)},
    optional={
        "initContainers": RANDOM_CONTAINERS,
        "nodeSelector": st.dictionaries(
            st.sampled_from(["zone", "kubernetes.io/hostname", "é"]), st.text(max_size=5)
        ),
        "overhead": st.dictionaries(RESOURCE_NAMES, QUANTITY_TEXT, max_size=2),
        "resourceClaims": st.lists(
            st.fixed_dictionaries(
                {"name": st.sampled_from(["a", "b"]), "resourceClaimName": st.sampled_from(["x", "y"])}
            ),
            max_size=2,
        ),
        "tolerations": st.lists(
            st.fixed_dictionaries({"operator": st.sampled_from(["Exists", "Equal", "Bogus"])}), max_size=2
        ),
    },
)


@given(specs=st.lists(RANDOM_POD_SPECS, min_size=6, max_size=6), gang_size=st.integers(1, 6))
@settings(
    max_examples=5,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
def test_random_pods_never_crash_the_operator_or_block_a_gang(
    sim: RunningCluster, operator: OperatorProcess, specs: list[dict[str, Any]], gang_size: int
) -> None:
    hostile = unique("random")
    create(sim, PODGROUPS, podgroup(hostile, gang_size))
    for index, spec in enumerate(specs):
        body = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"{hostile}-{index}", "labels": {GROUP_LABEL: hostile}},
            "spec": spec,
        }
        response = sim.http.post(PODS.format(ns=NAMESPACE), body)
        assert response.status in (201, 400, 422), f"pod {index}: {response.status} {response.message}"
        if response.status == 400:  # a malformed quantity fails decoding, as on kube-apiserver
            assert "quantities must match the regular expression" in response.message, response.message
        if response.status == 422:  # several errors are listed in brackets
            invalid = f'Pod "{hostile}-{index}" is invalid: '
            assert response.message.startswith((invalid + "spec.", invalid + "[spec.")), response.message
    feasible = unique("after-random")
    create_group(sim, podgroup(feasible, 2), [pod(f"{feasible}-{i}", feasible) for i in range(2)])
    wait_until(
        lambda: bound(sim, feasible) == 2, PROMPT_SECONDS, 0.2, f"gang {feasible} to bind after random pods"
    )
    assert operator.exited() is None, f"lockstep run exited with {operator.exited()}"
    assert [v for v in check_state(sim.state()) if not v.transient] == []
