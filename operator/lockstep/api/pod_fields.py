"""Which Pod fields affect placement, and whether lockstep implements them: the one table.

Every field of ``PodSpec`` is listed (``tests/unit/scheduler/test_pod_fields.py`` walks the Pod
schema of the API's OpenAPI and fails on a field missing here). ``DESCEND`` marks an object (or a
list of objects, whose items' fields are listed as ``name[].field``) with each of its fields listed
too. A pod that sets a ``REFUSED`` field is not placed: it gets PodScheduled=False with reason
``UnsupportedPodSpec`` naming the field (plugin ``UnsupportedPodSpec``).
Implementing a field means changing its entry to ``IMPLEMENTED``, nothing else here.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from enum import Enum
from typing import Any


class Support(Enum):
    IMPLEMENTED = "implemented"  # lockstep honours it as kube-scheduler does
    REFUSED = "refused"  # it affects placement and lockstep does not implement it: pods are refused
    IRRELEVANT = "irrelevant"  # it does not affect where a pod may go (or admission applied it)
    DESCEND = "descend"  # placement-relevant object: each of its fields has its own entry


_I, _R, _X, _D = Support.IMPLEMENTED, Support.REFUSED, Support.IRRELEVANT, Support.DESCEND

_AFFINITY_TERM = {
    "labelSelector": _I,
    "matchLabelKeys": _I,
    "mismatchLabelKeys": _I,
    "namespaceSelector": _I,
    "namespaces": _I,
    "topologyKey": _I,
}


def _pod_affinity(prefix: str) -> dict[str, Support]:
    required = f"{prefix}.requiredDuringSchedulingIgnoredDuringExecution[]"
    preferred = f"{prefix}.preferredDuringSchedulingIgnoredDuringExecution[]"
    table = {prefix: _D, required[:-2]: _D, preferred[:-2]: _D, f"{preferred}.weight": _I}
    table[f"{preferred}.podAffinityTerm"] = _D
    for name, support in _AFFINITY_TERM.items():
        table[f"{required}.{name}"] = support
        table[f"{preferred}.podAffinityTerm.{name}"] = support
    return table


_CONTAINER_IRRELEVANT = [
    "args",
    "command",
    "env",
    "envFrom",
    "imagePullPolicy",
    "lifecycle",
    "livenessProbe",
    "name",
    "readinessProbe",
    "resizePolicy",
    "restartPolicyRules",
    "securityContext",
    "startupProbe",
    "stdin",
    "stdinOnce",
    "terminationMessagePath",
    "terminationMessagePolicy",
    "tty",
    "volumeDevices",
    "volumeMounts",
    "workingDir",
]


def _container(prefix: str, ports: Support) -> dict[str, Support]:
    table = {prefix[:-2]: _D, f"{prefix}.resources": _I, f"{prefix}.restartPolicy": _I}
    table[f"{prefix}.image"] = _I  # ImageLocality (a score)
    table[f"{prefix}.ports"] = ports
    if ports is _D:
        table.update({f"{prefix}.ports[].{name}": _I for name in ("hostPort", "hostIP", "protocol")})
        table.update({f"{prefix}.ports[].{name}": _X for name in ("containerPort", "name")})
    table.update({f"{prefix}.{name}": _X for name in _CONTAINER_IRRELEVANT})
    return table


# Volume sources kube-scheduler's volume plugins look at (VolumeBinding, VolumeRestrictions,
# VolumeZone, NodeVolumeLimits) that lockstep does not implement (persistentVolumeClaim and ephemeral,
# whose claim is ``<pod>-<volume>``, it does); every other source does not affect placement.
REFUSED_VOLUME_SOURCES: dict[str, str] = {
    "csi": "NodeVolumeLimits",
    "gcePersistentDisk": "VolumeRestrictions",
    "awsElasticBlockStore": "VolumeRestrictions",
    "azureDisk": "NodeVolumeLimits",
    "cinder": "NodeVolumeLimits",
    "rbd": "VolumeRestrictions",
    "iscsi": "VolumeRestrictions",
}
_OTHER_VOLUME_SOURCES = [
    "azureFile",
    "cephfs",
    "configMap",
    "downwardAPI",
    "emptyDir",
    "fc",
    "flexVolume",
    "flocker",
    "gitRepo",
    "glusterfs",
    "hostPath",
    "image",
    "name",
    "nfs",
    "photonPersistentDisk",
    "portworxVolume",
    "projected",
    "quobyte",
    "scaleIO",
    "secret",
    "storageos",
    "vsphereVolume",
]

# Why a refused field matters: the kube-scheduler plugin that enforces it.
REFUSED_BECAUSE: dict[str, str] = {
    **{f"spec.volumes[].{source}": plugin for source, plugin in REFUSED_VOLUME_SOURCES.items()},
}

POD_SPEC_FIELDS: dict[str, Support] = {
    "spec.affinity": _D,
    "spec.affinity.nodeAffinity": _D,
    "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution": _I,
    "spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution": _I,
    **_pod_affinity("spec.affinity.podAffinity"),
    **_pod_affinity("spec.affinity.podAntiAffinity"),
    **_container("spec.containers[]", _D),
    **_container("spec.initContainers[]", _X),  # kube-scheduler counts only app containers' ports
    "spec.topologySpreadConstraints": _D,
    **{
        f"spec.topologySpreadConstraints[].{name}": _I
        for name in (
            "labelSelector",
            "matchLabelKeys",
            "maxSkew",
            "minDomains",
            "nodeAffinityPolicy",
            "nodeTaintsPolicy",
            "topologyKey",
            "whenUnsatisfiable",
        )
    },
    "spec.volumes": _D,
    "spec.volumes[].persistentVolumeClaim": _I,
    "spec.volumes[].ephemeral": _I,
    **{f"spec.volumes[].{source}": _R for source in REFUSED_VOLUME_SOURCES},
    **{f"spec.volumes[].{source}": _X for source in _OTHER_VOLUME_SOURCES},
    "spec.hostNetwork": _I,  # its container ports are host ports
    "spec.nodeName": _I,
    "spec.nodeSelector": _I,
    "spec.overhead": _I,
    "spec.priority": _I,
    "spec.resourceClaims": _I,
    "spec.resources": _I,
    "spec.schedulerName": _I,
    "spec.schedulingGates": _I,
    "spec.tolerations": _I,
    # Joining an upstream scheduling.k8s.io PodGroup: scheduled with that group.
    "spec.schedulingGroup": _I,
    # RuntimeClass admission merges the class's nodeSelector, tolerations and overhead into the pod;
    # the priority admission plugin sets spec.priority from the class; lockstep does not preempt.
    "spec.runtimeClassName": _X,
    "spec.priorityClassName": _X,
    "spec.preemptionPolicy": _X,
    "spec.os": _X,  # validation only; kube-scheduler does not filter on it
    **{
        f"spec.{name}": _X
        for name in [
            "activeDeadlineSeconds",
            "automountServiceAccountToken",
            "dnsConfig",
            "dnsPolicy",
            "enableServiceLinks",
            "ephemeralContainers",
            "evictionResponders",  # 1.37: who handles the pod's EvictionRequests, after placement
            "hostAliases",
            "hostIPC",
            "hostPID",
            "hostUsers",
            "hostname",
            "hostnameOverride",
            "imagePullSecrets",
            "readinessGates",
            "restartPolicy",
            "securityContext",
            "serviceAccount",
            "serviceAccountName",
            "setHostnameAsFQDN",
            "shareProcessNamespace",
            "subdomain",
            "terminationGracePeriodSeconds",
        ]
    },
}


def refused_fields() -> list[str]:
    return [path for path, support in POD_SPEC_FIELDS.items() if support is Support.REFUSED]


def _compile(path: str) -> tuple[tuple[str, bool], ...]:
    """``spec.volumes[].csi`` -> (("volumes", True), ("csi", False)): name, and whether a list."""
    parts = path.split(".")[1:]
    return tuple((part.removesuffix("[]"), part.endswith("[]")) for part in parts)


_REFUSED_PATHS: tuple[tuple[str, tuple[tuple[str, bool], ...]], ...] = tuple(
    (path, _compile(path)) for path in refused_fields()
)


def _present(value: Any, steps: tuple[tuple[str, bool], ...], shown: str) -> Iterator[str]:
    if not steps:
        yield shown
        return
    if not isinstance(value, Mapping):
        return
    (name, is_list), rest = steps[0], steps[1:]
    child = value.get(name)
    if child is None or (child == [] and is_list):
        return
    if is_list:
        if isinstance(child, list):
            for index, item in enumerate(child):
                yield from _present(item, rest, f"{shown}.{name}[{index}]")
        return
    yield from _present(child, rest, f"{shown}.{name}")


# The spec fields under which every refused field lies: a pod setting none of them is checked at once.
REFUSED_ROOTS: frozenset[str] = frozenset(steps[0][0] for _, steps in _REFUSED_PATHS)


def refused_in(spec: Mapping[str, Any]) -> tuple[str, ...]:
    """The refused fields ``spec`` sets, by their path with list indexes (``spec.volumes[0].csi``)."""
    if not any(root in spec for root in REFUSED_ROOTS):
        return ()
    found: list[str] = []
    for _, steps in _REFUSED_PATHS:
        found.extend(_present(spec, steps, "spec"))
    return tuple(found)


def refused_because(shown: str) -> str:
    """The kube-scheduler plugin behind a refused field given with list indexes."""
    generic = ".".join(part.split("[")[0] + ("[]" if "[" in part else "") for part in shown.split("."))
    return REFUSED_BECAUSE.get(generic, "")
