"""DRA extended resources (DRAExtendedResource): a pod asking for ``example.com/gpu: 1`` gets devices
of the DeviceClass whose ``spec.extendedResourceName`` is ``example.com/gpu`` (or of class ``c`` for
``deviceclass.resource.kubernetes.io/c``) on a node that does not advertise the resource itself.

As kube-scheduler does, the devices go into one ResourceClaim per pod that the scheduler creates at
PreBind: ``generateName: <pod>-extended-resources-``, annotated
``resource.kubernetes.io/extended-resource-claim: "true"``, controlled by the pod, with one request per
container and resource named ``container-<i>-request-<j>`` (``i``: the container's index in
initContainers then containers; ``j``: the resource's index among the container's sorted requests).
The pod's ``status.extendedResourceClaimStatus`` maps each container's resource to its requests and
names the claim, which is how the kubelet finds the devices.

Pure functions; the plugin (``scheduler/plugins/dynamic_resources.py``) decides when, ``dra/ports.py``
writes.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from lockstep.api.resource import (
    ALLOCATION_MODE_EXACT_COUNT,
    API_VERSION,
    DELETE_PROTECTION_FINALIZER,
    ResourceClaim,
    parse_resource,
)
from lockstep.scheduler.framework import ContainerRequests, PodInfo

IMPLICIT_EXTENDED_RESOURCE_PREFIX = "deviceclass.resource.kubernetes.io/"
EXTENDED_RESOURCE_CLAIM_ANNOTATION = "resource.kubernetes.io/extended-resource-claim"

_QUALIFIED_NAME = re.compile(
    r"^(?:[a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)


@functools.lru_cache(maxsize=1024)
def is_dra_extended_resource_name(name: str) -> bool:
    """Upstream ``IsDRAExtendedResourceName``: an extended resource name (a domain-prefixed name outside
    kubernetes.io, not ``requests.*``) or the implicit name of a DeviceClass."""
    if name.startswith(IMPLICIT_EXTENDED_RESOURCE_PREFIX):
        return True
    if "/" not in name or "kubernetes.io/" in name or name.startswith("requests."):
        return False
    return _QUALIFIED_NAME.match(f"requests.{name}") is not None


@dataclass(frozen=True, slots=True)
class ExtendedClaimRequests:
    """The claim's ``spec.devices.requests`` and the pod status' ``requestMappings`` for one node."""

    requests: tuple[dict[str, Any], ...]
    mappings: tuple[dict[str, str], ...]


@dataclass(slots=True)
class _Request:
    name: str
    count: int


def _container_request(
    index: int, container: ContainerRequests, resource: str, reusable: Sequence[_Request | None]
) -> tuple[_Request | None, list[dict[str, str]]]:
    """Upstream ``createResourceRequestAndMappings``: the container first uses ``reusable`` requests
    (those of the long-lived containers that start after a non-sidecar init container), then asks for
    the rest in a request of its own."""
    quantity = container.extended.get(resource)
    if not quantity:  # absent, zero, or not an integer: no request
        return None, []
    mappings: list[dict[str, str]] = []
    reused = 0
    for request in reusable:
        if request is None:
            continue
        reused += request.count
        mappings.append(
            {"containerName": container.name, "resourceName": resource, "requestName": request.name}
        )
        if reused >= quantity:
            return None, mappings
    name = f"container-{index}-request-{container.resources.index(resource)}"
    mappings.append({"containerName": container.name, "resourceName": resource, "requestName": name})
    return _Request(name, quantity - reused), mappings


def requests_and_mappings(
    containers: Sequence[ContainerRequests], classes: Mapping[str, str]
) -> ExtendedClaimRequests:
    """Upstream ``createRequestsAndMappings`` for the resources ``classes`` maps to DeviceClass names:
    per resource, a request for each long-lived container (app containers and sidecars) and one for the
    largest non-sidecar init container, which first reuses the requests of the long-lived containers
    after it; requests sorted by name."""
    requests: list[_Request] = []
    class_of: dict[str, str] = {}
    mappings: list[dict[str, str]] = []
    for resource in sorted(classes):
        long_lived: list[_Request | None] = [None] * len(containers)
        long_lived_mappings: list[dict[str, str]] = []
        for index, container in enumerate(containers):
            if container.init:
                continue
            request, container_mappings = _container_request(index, container, resource, ())
            long_lived[index] = request
            long_lived_mappings.extend(container_mappings)
        largest: _Request | None = None
        short_lived_names: set[str] = set()
        short_lived_mappings: list[dict[str, str]] = []
        for index, container in enumerate(containers):
            if not container.init:
                continue
            request, container_mappings = _container_request(index, container, resource, long_lived[index:])
            if request is not None:
                short_lived_names.add(request.name)
                if largest is None or largest.count < request.count:
                    largest = request
            short_lived_mappings.extend(container_mappings)
        if largest is not None and len(short_lived_names) > 1:
            short_lived_names.discard(largest.name)
            for mapping in short_lived_mappings:
                if mapping["requestName"] in short_lived_names:
                    mapping["requestName"] = largest.name
        for request in ([largest] if largest is not None else []) + [r for r in long_lived if r is not None]:
            requests.append(request)
            class_of[request.name] = classes[resource]
        mappings.extend(long_lived_mappings)
        mappings.extend(short_lived_mappings)
    requests.sort(key=lambda request: request.name)
    return ExtendedClaimRequests(
        tuple(
            {
                "name": request.name,
                "exactly": {
                    "deviceClassName": class_of[request.name],
                    "allocationMode": ALLOCATION_MODE_EXACT_COUNT,
                    "count": request.count,
                },
            }
            for request in requests
        ),
        tuple(mappings),
    )


def claim_for(pod: PodInfo, requests: ExtendedClaimRequests) -> dict[str, Any]:
    """The ResourceClaim to create for the pod (API shape, no name: the API server generates it). It is
    created with the delete-protection finalizer its allocation needs (kube-scheduler adds it in a
    second write), so that it cannot vanish while its devices are in use."""
    return {
        "apiVersion": API_VERSION,
        "kind": "ResourceClaim",
        "metadata": {
            "generateName": f"{pod.name}-extended-resources-",
            "namespace": pod.namespace,
            "annotations": {EXTENDED_RESOURCE_CLAIM_ANNOTATION: "true"},
            "finalizers": [DELETE_PROTECTION_FINALIZER],
            "ownerReferences": [
                {"apiVersion": "v1", "kind": "Pod", "name": pod.name, "uid": pod.uid, "controller": True}
            ],
        },
        "spec": {"devices": {"requests": list(requests.requests)}},
    }


def in_memory_claim(pod: PodInfo, requests: ExtendedClaimRequests) -> ResourceClaim:
    """The claim as the allocator sees it before it exists: named after its generateName (for messages)
    with a UID no API object has (for the in-flight allocation)."""
    body = claim_for(pod, requests)
    body["metadata"].update(name=f"{pod.name}-extended-resources", uid=f"extended-resources/{pod.uid}")
    return parse_resource(ResourceClaim, body)


def is_extended_claim_of(claim: ResourceClaim, pod: PodInfo) -> bool:
    """Upstream ``findExtendedResourceClaim``: annotated, and controlled by this pod (name and UID)."""
    if claim.metadata.annotations.get(EXTENDED_RESOURCE_CLAIM_ANNOTATION) != "true":
        return False
    return any(
        ref.controller and ref.kind == "Pod" and ref.name == pod.name and ref.uid == pod.uid
        for ref in claim.metadata.owner_references
    )


def dra_resources(pod: PodInfo, class_for: Callable[[str], str | None]) -> dict[str, str]:
    """The pod's requested extended resources that a DeviceClass provides: resource -> class name."""
    mapped: dict[str, str] = {}
    for resource, amount in pod.requests.items():
        if amount and is_dra_extended_resource_name(resource):
            class_name = class_for(resource)
            if class_name is not None:
                mapped[resource] = class_name
    return mapped
