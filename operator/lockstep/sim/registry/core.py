"""The core API group (v1): namespaces, nodes and pods, as their kube-apiserver strategies."""

from __future__ import annotations

import re
from typing import Any

from lockstep.sim import errors as fe
from lockstep.sim.errors import FieldError, bad_request
from lockstep.sim.features import FeatureGates
from lockstep.sim.godiff import internal_pod_spec, object_diff
from lockstep.sim.objectmeta import (
    DNS1123_LABEL,
    LABEL_MESSAGE,
    PlainStrategy,
    dns1123_label_errors,
    dns1123_subdomain_errors,
    now_rfc3339,
    random_suffix,
    validate_name,
)
from lockstep.sim.registry.core_resources import (
    default_pod_level_resources,
    is_supported_pod_level_resource,
    pod_level_resources_in_use,
    positive_cpu_memory,
    stored_quantity,
    validate_pod_resources,
    validate_resource_requirements,
)
from lockstep.sim.registry.core_storage import default_ephemeral_volumes, ephemeral_volume_errors
from lockstep.sim.registry.scheduling import admit_pod_priority
from lockstep.sim.resources import METADATA_FIELDS, ResourceType, Strategy, WriteContext

JsonObject = dict[str, Any]


class NamespaceStrategy(Strategy):
    def default(self, rt: ResourceType, obj: JsonObject, old: JsonObject | None) -> None:
        meta = obj["metadata"]
        labels = meta.setdefault("labels", {})
        labels["kubernetes.io/metadata.name"] = meta.get("name", "")
        obj.setdefault("spec", {}).setdefault("finalizers", ["kubernetes"])
        obj.setdefault("status", {}).setdefault("phase", "Active")

    def validate(
        self, rt: ResourceType, obj: JsonObject, old: JsonObject | None, ctx: WriteContext
    ) -> list[FieldError]:
        return validate_name(obj["metadata"].get("name"), label=True) if old is None else []


# ---------------------------------------------------------------- nodes


class NodeStrategy(Strategy):
    def default(self, rt: ResourceType, obj: JsonObject, old: JsonObject | None) -> None:
        obj.setdefault("spec", {})
        obj.setdefault("status", {})

    def validate(
        self, rt: ResourceType, obj: JsonObject, old: JsonObject | None, ctx: WriteContext
    ) -> list[FieldError]:
        return validate_name(obj["metadata"].get("name")) if old is None else []


# ---------------------------------------------------------------- pods

MUTABLE_POD_SPEC_MESSAGE = (
    "pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,"
    "`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),"
    "`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)"
)
DEFAULT_TOLERATIONS = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")
POD_SMP_LISTS = {
    ("spec", "containers"): "name",
    ("spec", "initContainers"): "name",
    ("spec", "ephemeralContainers"): "name",
    ("spec", "containers", "ports"): "containerPort",
    ("spec", "initContainers", "ports"): "containerPort",
    ("spec", "containers", "env"): "name",
    ("spec", "initContainers", "env"): "name",
    ("spec", "containers", "volumeMounts"): "mountPath",
    ("spec", "initContainers", "volumeMounts"): "mountPath",
    ("spec", "containers", "volumeDevices"): "devicePath",
    ("spec", "initContainers", "volumeDevices"): "devicePath",
    ("spec", "topologySpreadConstraints"): "topologyKey",
    ("spec", "volumes"): "name",
    ("spec", "imagePullSecrets"): "name",
    ("spec", "schedulingGates"): "name",
    ("spec", "resourceClaims"): "name",
    ("spec", "hostAliases"): "ip",
    ("status", "conditions"): "type",
    ("status", "podIPs"): "ip",
    ("status", "hostIPs"): "ip",
    ("status", "resourceClaimStatuses"): "name",
}


def _image_pull_policy(image: str) -> str:
    name = image.split("@", 1)[0]
    last = name.rsplit("/", 1)[-1]
    if "@" in image:
        return "IfNotPresent"
    if ":" not in last or last.endswith(":latest"):
        return "Always"
    return "IfNotPresent"


def _store_quantities(resources: Any) -> None:
    """``SetDefaults_ResourceList`` on a ResourceRequirements' limits and requests."""
    for section in ("limits", "requests") if isinstance(resources, dict) else ():
        amounts = resources.get(section)
        if isinstance(amounts, dict):
            for name, raw in amounts.items():
                amounts[name] = stored_quantity(raw)


def _default_container(container: JsonObject) -> None:
    container.setdefault("terminationMessagePath", "/dev/termination-log")
    container.setdefault("terminationMessagePolicy", "File")
    if isinstance(container.get("image"), str):
        container.setdefault("imagePullPolicy", _image_pull_policy(container["image"]))
    for port in container.get("ports") or []:
        if isinstance(port, dict):
            port.setdefault("protocol", "TCP")
    _store_quantities(container.setdefault("resources", {}))


def default_pod_template_spec(spec: JsonObject) -> None:
    """``SetDefaults_PodSpec``: what a pod template gets too (admission adds the rest to pods only)."""
    for list_name in ("initContainers", "containers", "ephemeralContainers"):
        for container in spec.get(list_name) or []:
            if isinstance(container, dict):
                _default_container(container)
    _store_quantities(spec.get("resources"))
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("securityContext", {})
    spec.setdefault("schedulerName", "default-scheduler")
    default_ephemeral_volumes(spec)


def _pod_level_qos_class(resources: JsonObject) -> str:
    """``ComputePodQOS`` from pod-level resources: Guaranteed when cpu and memory are limited and every
    request equals its limit."""
    requests = positive_cpu_memory(resources.get("requests"))
    limits = positive_cpu_memory(resources.get("limits"))
    if not requests and not limits:
        return "BestEffort"
    guaranteed = not resources.get("limits") or set(limits) == {"cpu", "memory"}
    if guaranteed and len(requests) == len(limits) and all(limits.get(n) == v for n, v in requests.items()):
        return "Guaranteed"
    return "Burstable"


def qos_class(spec: JsonObject, pod_level_resources: bool) -> str:
    """``ComputePodQOS``; with PodLevelResources, a pod setting a supported pod-level resource is
    classed by its pod-level cpu and memory alone."""
    resources = spec.get("resources")
    if (
        pod_level_resources
        and isinstance(resources, dict)
        and any(
            is_supported_pod_level_resource(name)
            for section in ("requests", "limits")
            for name in (resources.get(section) or {})
        )
    ):
        return _pod_level_qos_class(resources)
    containers = [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]
    any_set = False
    guaranteed = True
    for c in containers:
        res = c.get("resources") or {}
        requests, limits = res.get("requests") or {}, res.get("limits") or {}
        if requests or limits:
            any_set = True
        for name in ("cpu", "memory"):
            if name not in limits or requests.get(name, limits.get(name)) != limits.get(name):
                guaranteed = False
    if not any_set:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


QUANTITY = re.compile(r"^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$")
QUANTITY_SYNTAX = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)(([KMGTPE]i)|[numkMGTPE]|[eE][+-]?\d+)?$")


def check_pod_quantities(rt: ResourceType, pod: JsonObject) -> None:
    """Resource quantities are parsed by the decoder: a malformed one is a 400 for the whole pod."""
    spec = pod.get("spec")
    if not isinstance(spec, dict):
        return
    containers = [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]
    resource_requirements = [c.get("resources") if isinstance(c, dict) else None for c in containers]
    for resources in [*resource_requirements, spec.get("resources")]:
        for section in ("requests", "limits"):
            for value in ((resources or {}).get(section) or {}).values():
                if not isinstance(value, int | float) and not (
                    isinstance(value, str) and QUANTITY.match(value) and QUANTITY_SYNTAX.match(value)
                ):
                    raise bad_request(
                        f'{rt.kind} in version "{rt.version}" cannot be handled as a {rt.kind}: '
                        f"quantities must match the regular expression '{QUANTITY.pattern}'"
                    )


def default_requests_from_limits(spec: JsonObject) -> None:
    """``SetDefaults_Pod``: a container's limit without a request is its request too (every resource;
    pods only, not pod templates)."""
    for list_name in ("initContainers", "containers"):
        for container in spec.get(list_name) or []:
            resources = container.get("resources") if isinstance(container, dict) else None
            if not isinstance(resources, dict):
                continue
            limits = resources.get("limits")
            if isinstance(limits, dict) and limits:
                requests = resources.get("requests")
                if not isinstance(requests, dict):
                    requests = resources["requests"] = {}
                for name, quantity in limits.items():
                    requests.setdefault(name, quantity)


class PodStrategy(Strategy):
    def __init__(self, gates: FeatureGates) -> None:
        self.gates = gates

    def decode(self, rt: ResourceType, obj: JsonObject, ctx: WriteContext) -> None:
        check_pod_quantities(rt, obj)

    def admit(self, rt: ResourceType, obj: JsonObject, old: JsonObject | None, ctx: WriteContext) -> None:
        if old is None:
            admit_pod_priority(obj, ctx)

    def default(self, rt: ResourceType, obj: JsonObject, old: JsonObject | None) -> None:
        spec = obj.setdefault("spec", {})
        if not isinstance(spec, dict):
            return
        default_pod_template_spec(spec)
        default_requests_from_limits(spec)
        if self.gates["PodLevelResources"]:
            default_pod_level_resources(spec)
        elif not pod_level_resources_in_use((old or {}).get("spec")):
            spec.pop("resources", None)  # dropDisabledPodLevelResources
        self._drop_disabled_status_fields(obj, old)
        spec.setdefault("serviceAccountName", spec.get("serviceAccount") or "default")
        spec.setdefault("serviceAccount", spec["serviceAccountName"])
        spec.setdefault("priority", 0)
        spec.setdefault("enableServiceLinks", True)
        spec.setdefault("preemptionPolicy", "PreemptLowerPriority")
        if old is not None:
            return
        tolerations = spec.setdefault("tolerations", [])
        for key in DEFAULT_TOLERATIONS:
            if not any(
                t.get("key") == key and t.get("effect") in (None, "", "NoExecute") for t in tolerations
            ):
                tolerations.append(
                    {"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}
                )
        if spec.get("automountServiceAccountToken") is not False:
            self._mount_service_account_token(spec)
        status = obj.setdefault("status", {})
        status.setdefault("phase", "Pending")
        status["qosClass"] = qos_class(spec, self.gates["PodLevelResources"])
        if spec.get("schedulingGates"):
            status["conditions"] = [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "lastProbeTime": None,
                    "lastTransitionTime": now_rfc3339(),
                    "reason": "SchedulingGated",
                    "message": "Scheduling is blocked due to non-empty scheduling gates",
                }
            ]

    def _drop_disabled_status_fields(self, obj: JsonObject, old: JsonObject | None) -> None:
        """``dropDisabledPodStatusFields``; a pod is created with a fresh status (PrepareForCreate),
        so a client cannot create one that claims an extended-resource claim."""
        status = obj.get("status")
        if not isinstance(status, dict):
            return
        old_status = (old or {}).get("status") or {}
        if old is None or (
            not self.gates["DRAExtendedResource"] and not old_status.get("extendedResourceClaimStatus")
        ):
            status.pop("extendedResourceClaimStatus", None)

    @staticmethod
    def _mount_service_account_token(spec: JsonObject) -> None:
        """What the ServiceAccount admission plugin adds (upstream sources: token, CA, namespace)."""
        volume_name = "kube-api-access-" + random_suffix()
        spec.setdefault("volumes", []).append(
            {
                "name": volume_name,
                "projected": {
                    "sources": [
                        {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                        {
                            "configMap": {
                                "name": "kube-root-ca.crt",
                                "items": [{"key": "ca.crt", "path": "ca.crt"}],
                            }
                        },
                        {
                            "downwardAPI": {
                                "items": [
                                    {
                                        "path": "namespace",
                                        "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"},
                                    }
                                ]
                            }
                        },
                    ],
                    "defaultMode": 420,
                },
            }
        )
        mount = {
            "name": volume_name,
            "readOnly": True,
            "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
        }
        for list_name in ("initContainers", "containers"):
            for container in spec.get(list_name) or []:
                container.setdefault("volumeMounts", []).append(dict(mount))

    def normalize(self, rt: ResourceType, obj: JsonObject) -> None:
        status = obj.get("status")
        if not isinstance(status, dict):
            return
        for condition in status.get("conditions") or []:
            if isinstance(condition, dict):
                condition.setdefault("lastProbeTime", None)
                condition.setdefault("lastTransitionTime", None)
        if status.get("podIP") and not status.get("podIPs"):
            status["podIPs"] = [{"ip": status["podIP"]}]

    def validate(
        self, rt: ResourceType, obj: JsonObject, old: JsonObject | None, ctx: WriteContext
    ) -> list[FieldError]:
        spec = obj.get("spec") or {}
        if old is None:
            errors = validate_name(obj["metadata"].get("name"))
            errors.extend(ephemeral_volume_errors(spec))
            claim_names = frozenset(
                str(c.get("name"))
                for c in spec.get("resourceClaims") or []
                if isinstance(c, dict) and c.get("name")
            )
            containers = spec.get("containers")
            if not containers:
                errors.append(fe.required("spec.containers"))
            else:
                seen: set[str] = set()
                for i, container in enumerate(containers):
                    name = container.get("name") if isinstance(container, dict) else None
                    path = f"spec.containers[{i}]"
                    if not name:
                        errors.append(fe.required(f"{path}.name"))
                    elif name in seen:
                        errors.append(fe.duplicate(f"{path}.name", name))
                    elif not DNS1123_LABEL.match(name):
                        errors.append(fe.invalid(f"{path}.name", name, LABEL_MESSAGE))
                    else:
                        seen.add(name)
                    if isinstance(container, dict):
                        if not container.get("image"):
                            errors.append(fe.required(f"{path}.image"))
                        resources = container.get("resources")
                        errors.extend(
                            validate_resource_requirements(resources, f"{path}.resources", claim_names)
                        )
            for i, container in enumerate(spec.get("initContainers") or []):
                if isinstance(container, dict):
                    path = f"spec.initContainers[{i}].resources"
                    errors.extend(
                        validate_resource_requirements(container.get("resources"), path, claim_names)
                    )
            if self.gates["PodLevelResources"]:
                errors.extend(validate_pod_resources(spec, claim_names))
            return errors
        if ctx.subresource:
            return self._validate_status(obj, old) + validate_extended_resource_claim_status(obj)
        return self._validate_spec_update(spec, old.get("spec") or {})

    @staticmethod
    def _validate_status(obj: JsonObject, old: JsonObject) -> list[FieldError]:
        old_phase = (old.get("status") or {}).get("phase")
        new_phase = (obj.get("status") or {}).get("phase")
        if old_phase in ("Succeeded", "Failed") and new_phase != old_phase:
            return [
                fe.forbidden(
                    "status.phase", f"cannot transition from terminal phase {old_phase} to {new_phase}"
                )
            ]
        return []

    @staticmethod
    def _validate_spec_update(spec: JsonObject, old_spec: JsonObject) -> list[FieldError]:
        for list_name in ("containers", "initContainers"):
            new_names = [c.get("name") for c in spec.get(list_name) or []]
            old_names = [c.get("name") for c in old_spec.get(list_name) or []]
            if len(new_names) != len(old_names):
                return [fe.forbidden(f"spec.{list_name}", "pod updates may not add or remove containers")]
        comparable_new, comparable_old = dict(spec), dict(old_spec)
        if old_spec.get("schedulingGates"):
            # A gated pod may gain node selector terms (Kueue writes its flavor's labels before it
            # removes its gate): additions only, as upstream's validation allows.
            old_selector = old_spec.get("nodeSelector") or {}
            new_selector = spec.get("nodeSelector") or {}
            if all(new_selector.get(k) == v for k, v in old_selector.items()):
                comparable_new.pop("nodeSelector", None)
                comparable_old.pop("nodeSelector", None)
        for s in (comparable_new, comparable_old):
            for list_name in ("containers", "initContainers"):
                s[list_name] = [{k: v for k, v in c.items() if k != "image"} for c in s.get(list_name) or []]
            for key in (
                "activeDeadlineSeconds",
                "tolerations",
                "terminationGracePeriodSeconds",
                "schedulingGates",
            ):
                s.pop(key, None)
        old_tolerations = old_spec.get("tolerations") or []
        new_tolerations = spec.get("tolerations") or []
        tolerations_ok = all(t in new_tolerations for t in old_tolerations)
        if comparable_new != comparable_old or not tolerations_ok:
            munged = dict(spec)
            for key in (
                "activeDeadlineSeconds",
                "tolerations",
                "terminationGracePeriodSeconds",
                "schedulingGates",
            ):
                munged.pop(key, None)
                if key in old_spec:
                    munged[key] = old_spec[key]
            for list_name in ("containers", "initContainers"):
                if spec.get(list_name):
                    munged[list_name] = [
                        {**c, "image": o.get("image")}
                        for c, o in zip(spec[list_name], old_spec[list_name], strict=True)
                    ]
            diff = object_diff(internal_pod_spec(old_spec), internal_pod_spec(munged))
            return [fe.forbidden("spec", f"{MUTABLE_POD_SPEC_MESSAGE}\n{diff}")]
        old_gates = [g.get("name") for g in old_spec.get("schedulingGates") or []]
        new_gates = [g.get("name") for g in spec.get("schedulingGates") or []]
        if any(g not in old_gates for g in new_gates):
            return [
                fe.forbidden(
                    "spec.schedulingGates", "only deletion is allowed, but found new scheduling gate"
                )
            ]
        return []

    def bookmark(self, rt: ResourceType, rv: int) -> JsonObject:
        return {
            "kind": "Pod",
            "apiVersion": "v1",
            "metadata": {"resourceVersion": str(rv)},
            "spec": {"containers": None},
            "status": {},
        }


# ---------------------------------------------------------------- events


def validate_extended_resource_claim_status(pod: JsonObject) -> list[FieldError]:
    """``validatePodExtendedResourceClaimStatus``: what the scheduler records of the claim it made for
    a pod's DRA-backed extended resources. Not immutable: a new scheduling attempt replaces it."""
    claim_status = (pod.get("status") or {}).get("extendedResourceClaimStatus")
    if not isinstance(claim_status, dict):
        return []
    path = "status.extendedResourceClaimStatus"
    spec = pod.get("spec") or {}
    containers = {
        c.get("name"): c
        for list_name in ("initContainers", "containers")
        for c in spec.get(list_name) or []
        if isinstance(c, dict)
    }
    errors: list[FieldError] = []
    mappings = claim_status.get("requestMappings") or []
    if not mappings:
        errors.append(fe.required(f"{path}.requestMappings", "at least one request mapping is required"))
    seen: set[tuple[str, str, str]] = set()
    for i, mapping in enumerate(mappings):
        mapping = mapping if isinstance(mapping, dict) else {}
        item = f"{path}.requestMappings[{i}]"
        container_name = str(mapping.get("containerName") or "")
        resource_name = str(mapping.get("resourceName") or "")
        request_name = str(mapping.get("requestName") or "")
        container = containers.get(container_name)
        if container is None:
            errors.append(
                fe.invalid(
                    f"{item}.containerName",
                    container_name,
                    "must match the name of an entry in spec.initContainers.name or spec.containers.name",
                )
            )
        elif resource_name not in ((container.get("resources") or {}).get("requests") or {}):
            errors.append(
                fe.invalid(
                    f"{item}.resourceName",
                    resource_name,
                    "must match the extended resource name of an entry in "
                    "spec.initContainers.resources.requests or spec.containers.resources.requests",
                )
            )
        # upstream's path for the request name has no index
        errors.extend(dns1123_label_errors(f"{path}.requestName", request_name))
        key = (container_name, resource_name, request_name)
        if key in seen:
            errors.append(fe.duplicate(f"{item}.containerName", container_name))
            errors.append(fe.duplicate(f"{item}.resourceName", resource_name))
            errors.append(fe.duplicate(f"{item}.requestName", request_name))
        seen.add(key)
    claim_name = str(claim_status.get("resourceClaimName") or "")
    if not claim_name:
        errors.append(fe.required(f"{path}.resourceClaimName"))
    else:
        errors.extend(dns1123_subdomain_errors(f"{path}.resourceClaimName", claim_name))
    return errors


def core_types(gates: FeatureGates) -> list[ResourceType]:
    pod_fields = {
        **METADATA_FIELDS,
        **{
            f: f
            for f in (
                "spec.nodeName",
                "spec.restartPolicy",
                "spec.schedulerName",
                "spec.serviceAccountName",
                "spec.hostNetwork",
                "status.phase",
                "status.podIP",
                "status.nominatedNodeName",
            )
        },
    }
    return [
        ResourceType(
            "",
            "v1",
            "namespaces",
            "namespace",
            "Namespace",
            False,
            NamespaceStrategy(),
            short_names=("ns",),
            returns_deleted_object=True,
            verbs=tuple(v for v in ("create", "delete", "get", "list", "patch", "update", "watch")),
            subresources=("status",),
            field_labels={**METADATA_FIELDS, "status.phase": "status.phase"},
            smp_lists={("spec", "finalizers"): "$set", ("status", "conditions"): "type"},
        ),
        ResourceType(
            "",
            "v1",
            "nodes",
            "node",
            "Node",
            False,
            NodeStrategy(),
            short_names=("no",),
            subresources=("status",),
            status_updates_metadata=True,
            field_labels={**METADATA_FIELDS, "spec.unschedulable": "spec.unschedulable"},
            smp_lists={
                ("status", "conditions"): "type",
                ("status", "addresses"): "type",
                ("spec", "podCIDRs"): "$set",
            },
        ),
        ResourceType(
            "",
            "v1",
            "pods",
            "pod",
            "Pod",
            True,
            PodStrategy(gates),
            short_names=("po",),
            categories=("all",),
            subresources=("binding", "eviction", "status"),
            has_generation=True,
            returns_deleted_object=True,
            status_updates_metadata=True,
            field_labels=pod_fields,
            smp_lists=dict(POD_SMP_LISTS),
        ),
        # The legacy POST /api/v1/namespaces/{ns}/bindings: binds the pod its metadata names, as
        # pods/{name}/binding does (the server handles it; nothing is stored).
        ResourceType("", "v1", "bindings", "binding", "Binding", True, PlainStrategy(), verbs=("create",)),
    ]
