"""The chart's RBAC is the least that works: nothing the code does not call, everything it does."""

from __future__ import annotations

import textwrap
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from chart_render import HA_VALUES, NAMESPACE, only, render
from rbac_scan import CallSite, Permission, Unmapped, granted_permissions, python_files, scan


def _grants(group: str, resources: str, verbs: str) -> set[Permission]:
    return {Permission(group, r, v) for r in resources.split() for v in verbs.split()}


# What the operator calls on the API cluster-wide (see the ClusterRole template for why).
CLUSTER_NEEDS: set[Permission] = (
    _grants("", "pods", "get list watch delete")
    | _grants("policy", "poddisruptionbudgets", "list watch")
    | _grants("", "pods/binding", "create")
    | _grants("", "pods/eviction", "create")
    | _grants("", "pods/status", "patch")
    | _grants("", "nodes", "list watch")
    | _grants("", "namespaces", "list watch")
    | _grants("", "events", "create patch")
    | _grants("scheduling.lockstep.dev", "podgroups", "get list watch create patch")
    | _grants("scheduling.lockstep.dev", "podgroups/status", "patch")
    | _grants("scheduling.k8s.io", "podgroups", "get list watch patch")
    | _grants("scheduling.k8s.io", "podgroups/status", "patch")
    | _grants("scheduling.k8s.io", "priorityclasses", "list watch")
    | _grants("scheduling.k8s.io", "compositepodgroups", "get list watch")
    | _grants("scheduling.k8s.io", "compositepodgroups/status", "patch")
    | _grants("scheduling.x-k8s.io", "podgroups", "get list watch")
    | _grants("scheduling.x-k8s.io", "podgroups/status", "patch")
    | _grants("scheduling.volcano.sh", "podgroups", "get list watch patch")
    | _grants("resource.k8s.io", "resourceclaims", "get list watch create patch delete")
    | _grants("resource.k8s.io", "resourceclaims/status", "patch")
    | _grants("resource.k8s.io", "resourceclaimtemplates resourceslices deviceclasses", "list watch")
    | _grants("", "persistentvolumes persistentvolumeclaims", "list watch patch")
    | _grants("storage.k8s.io", "storageclasses csinodes", "list watch")
    | _grants("batch", "jobs", "list watch")
    | _grants("jobset.x-k8s.io", "jobsets", "list watch")
    | _grants("leaderworkerset.x-k8s.io", "leaderworkersets", "list watch")
    | _grants("kubeflow.org", "pytorchjobs", "list watch")
    | _grants("ray.io", "rayclusters", "list watch")
)
# Leader election, in the release namespace only.
LEASE_NEEDS: set[Permission] = _grants("coordination.k8s.io", "leases", "get create update")

DANGEROUS_VERBS = {"*", "escalate", "bind", "impersonate", "deletecollection"}


@cache
def operator_code_scan() -> tuple[list[CallSite], list[Unmapped]]:
    return scan(python_files())


def roles(values: dict[str, Any]) -> list[dict[str, Any]]:
    return [o for o in render(values) if o["kind"] in ("Role", "ClusterRole")]


@pytest.mark.parametrize("values", [{}, HA_VALUES], ids=["defaults", "ha"])
def test_roles_have_no_wildcards_no_secrets_no_escalation(values: dict[str, Any]) -> None:
    for role in roles(values):
        name = f"{role['kind']} {role['metadata']['name']}"
        for rule in role["rules"]:
            assert "nonResourceURLs" not in rule, name
            for field in ("apiGroups", "resources", "verbs"):
                assert "*" not in rule[field], f"{name} has a wildcard in {field}: {rule}"
            assert not {"secrets", "configmaps"} & set(rule["resources"]), f"{name} grants {rule}"
            assert not DANGEROUS_VERBS & set(rule["verbs"]), f"{name} grants {rule}"


def test_cluster_role_grants_exactly_the_documented_needs() -> None:
    granted = granted_permissions(only(render(HA_VALUES), "ClusterRole"))
    assert granted - CLUSTER_NEEDS == set(), "the ClusterRole grants more than lockstep needs"
    assert CLUSTER_NEEDS - granted == set(), "the ClusterRole misses a permission lockstep needs"


def test_lease_role_grants_exactly_leader_election_in_the_release_namespace() -> None:
    objects = render(HA_VALUES)
    role = only(objects, "Role")
    assert role["metadata"]["namespace"] == NAMESPACE
    assert granted_permissions(role) == LEASE_NEEDS
    binding = only(objects, "RoleBinding")
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == only(objects, "ClusterRoleBinding")["subjects"]


def test_every_api_call_in_the_operator_code_is_allowed() -> None:
    sites, unmapped = operator_code_scan()
    assert unmapped == [], "API calls the RBAC scan cannot map (see tests/unit/chart/rbac_scan.py):\n" + (
        "\n".join(str(u) for u in unmapped)
    )
    granted = set().union(*(granted_permissions(role) for role in roles(HA_VALUES)))
    denied = [
        f"{site.file}:{site.line}: {site.call} needs {permission}"
        for site in sites
        for permission in sorted(site.permissions - granted)
    ]
    assert denied == [], "the chart's roles do not allow:\n" + "\n".join(denied)


def test_roles_grant_nothing_the_operator_code_does_not_use() -> None:
    sites, _ = operator_code_scan()
    if not sites:
        pytest.skip("operator/lockstep/kube and controller/ make no API calls yet")
    used = set().union(*(site.permissions for site in sites))
    unused = sorted((CLUSTER_NEEDS | LEASE_NEEDS) - used)
    assert unused == [], "granted but never called; drop from the chart or say why:\n" + "\n".join(
        str(p) for p in unused
    )


SAMPLE = """
import kopf
from kubernetes_asyncio import watch

from lockstep.kube.client import PODS, POD_GROUPS, RESOURCE_CLAIMS, PatchType

GROUP = "scheduling.lockstep.dev"
BINDING = "/api/v1/namespaces/{}/pods/{}/binding"  # rbac: create pods/binding


async def forward_patch(client, kind, namespace, name, body, *, subresource=None):
    return await client.patch(kind, namespace, name, body, PatchType.MERGE, subresource=subresource)


class Watcher:
    def __init__(self, client, kind):
        self.client = client
        self.kind = kind

    async def run(self):
        await self.client.list(self.kind)
        async for event in self.client.watch_stream(self.kind, None, resource_version="1"):
            pass


@kopf.on.event("pods", registry=registry)
async def on_pod(**_): ...


@kopf.index(GROUP, "v1alpha1", "podgroups")
async def podgroups(**_): ...


@kopf.on.event("resourceslices.resource.k8s.io")
async def on_slice(**_): ...


async def calls(client, core, custom, session, server, ns, name, body):
    await client.create(PODS, ns, body, name=name, subresource="binding")
    await self._client.get(RESOURCE_CLAIMS, ns, name)
    await client.replace(namespace=ns, name=name, body=body, kind=POD_GROUPS)
    await forward_patch(client, POD_GROUPS, ns, name, body, subresource="status")
    Watcher(client, RESOURCE_CLAIMS)
    await core.create_namespaced_pod_binding(name, ns, body)
    await core.patch_namespaced_pod_status(name, ns, body)
    await custom.patch_namespaced_custom_object_status(GROUP, "v1alpha1", ns, "podgroups", name, body)
    async for event in watch.Watch().stream(core.list_node):
        pass
    await session.post(f"{server}/api/v1/namespaces/{ns}/pods/{name}/binding", data=b"")
    await session.patch(f"{server}/apis/resource.k8s.io/v1/namespaces/{ns}/resourceclaims/{name}/status")
    await session.get(f"{server}/apis/{GROUP}/v1alpha1/podgroups", params={"watch": "1"})
    await session.request("PATCH", f"{server}/apis/events.k8s.io/v1/namespaces/{ns}/events/{name}")
    await session.post(server + BINDING.format(ns, name))
    kopf.operator(registry=registry)
"""


def test_scan_maps_each_documented_call_form(tmp_path: Path) -> None:
    source = tmp_path / "sample.py"
    source.write_text(textwrap.dedent(SAMPLE))
    sites, unmapped = scan([source])
    assert unmapped == []
    by_line = {site.line: site.permissions for site in sites}
    lines = source.read_text().splitlines()

    def needs(fragment: str) -> frozenset[Permission]:
        line = next(i for i, text in enumerate(lines, 1) if fragment in text)
        return by_line[line]

    assert needs("client.create(PODS") == _grants("", "pods/binding", "create")
    assert needs("_client.get(RESOURCE_CLAIMS") == _grants("resource.k8s.io", "resourceclaims", "get")
    assert needs("kind=POD_GROUPS") == _grants("scheduling.lockstep.dev", "podgroups", "update")
    assert needs("forward_patch(client, POD_GROUPS") == _grants(
        "scheduling.lockstep.dev", "podgroups/status", "patch"
    )
    assert needs("Watcher(client, RESOURCE") == _grants("resource.k8s.io", "resourceclaims", "list watch")
    assert needs('kopf.on.event("pods"') == _grants("", "pods", "list watch")
    assert needs("kopf.index(GROUP") == _grants("scheduling.lockstep.dev", "podgroups", "list watch")
    assert needs("resourceslices.resource") == _grants("resource.k8s.io", "resourceslices", "list watch")
    assert needs("create_namespaced_pod_binding") == _grants("", "pods/binding", "create")
    assert needs("patch_namespaced_pod_status") == _grants("", "pods/status", "patch")
    assert needs("custom_object_status") == _grants("scheduling.lockstep.dev", "podgroups/status", "patch")
    assert needs("stream(core.list_node)") == _grants("", "nodes", "list watch")
    assert needs("session.post(f") == _grants("", "pods/binding", "create")
    assert needs("resourceclaims/{name}/status") == _grants(
        "resource.k8s.io", "resourceclaims/status", "patch"
    )
    assert needs('params={"watch"') == _grants("scheduling.lockstep.dev", "podgroups", "watch")
    assert needs('request("PATCH"') == _grants("events.k8s.io", "events", "patch")
    assert needs("BINDING = ") == _grants("", "pods/binding", "create")
    assert needs("kopf.operator(") == _grants("", "namespaces", "list watch")


@pytest.mark.parametrize(
    ("code", "why"),
    [
        ('PATH = "/api/v1/namespaces/{}/pods/{}/binding"\n', "not passed straight to an HTTP method"),
        ("await session.post(f'{server}/apis/{group}/v1/{plural}/{name}')\n", "resource is not a literal"),
        ("await api.create_namespaced_persistent_volume_claim(ns, body)\n", "kind not in KINDS"),
        ("@kopf.on.event(*POD_RESOURCE)\nasync def on_pod(**_): ...\n", "Kopf handler"),
        ("# rbac: create gadgets\nawait session.post(url)\n", "unknown resource"),
        ("await client.get(kinds[0], ns, name)\n", "kind is not a constant"),
        (
            "await client.patch(PODS, ns, name, body, subresource=sub)\n",
            "subresource= is not a string literal",
        ),
    ],
    ids=[
        "path-constant",
        "path-variables",
        "unknown-method",
        "kopf-starred",
        "bad-comment",
        "kind-expression",
        "subresource-variable",
    ],
)
def test_scan_reports_what_it_cannot_map(tmp_path: Path, code: str, why: str) -> None:
    source = tmp_path / "sample.py"
    header = "import kubernetes_asyncio\nfrom lockstep.kube.client import PODS\n"
    body = "async def f():\n" + textwrap.indent(code, "    ") if "await" in code else code
    source.write_text(header + body)
    _, unmapped = scan([source])
    assert [u.why for u in unmapped if why in u.why], unmapped


def test_scan_finds_a_call_the_role_does_not_allow(tmp_path: Path) -> None:
    source = tmp_path / "sample.py"
    source.write_text(
        "import kubernetes_asyncio\n\n\nasync def f(core, client):\n    await core.patch_node('n', {})\n"
    )
    sites, unmapped = scan([source])
    assert unmapped == []
    granted = granted_permissions(only(render(HA_VALUES), "ClusterRole"))
    assert [p for site in sites for p in site.permissions - granted] == [Permission("", "nodes", "patch")]


def test_scan_ignores_cache_methods_named_like_api_calls_outside_kubernetes_asyncio(tmp_path: Path) -> None:
    source = tmp_path / "sample.py"
    source.write_text("def on_node(cache, name):\n    cache.delete_node(name)\n")
    assert scan([source]) == ([], [])
