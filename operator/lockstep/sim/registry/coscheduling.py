"""scheduling.x-k8s.io (scheduler-plugins coscheduling): the PodGroup CRD as published in
kubernetes-sigs/scheduler-plugins ``manifests/coscheduling/crd.yaml`` (controller-gen v0.11.1), served
through the emulator's CustomResourceDefinition support when a test or the demo installs it
(``SimCluster(install_crds=("coscheduling",))`` or ``SimCluster.install_crds``)."""

from __future__ import annotations

from typing import Any

NAME = "podgroups.scheduling.x-k8s.io"

_INT32 = {"format": "int32", "type": "integer"}
_QUANTITY = {
    "anyOf": [{"type": "integer"}, {"type": "string"}],
    "pattern": (
        r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))"
        r"(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
    ),
    "x-kubernetes-int-or-string": True,
}


def crd() -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": NAME,
            "annotations": {
                "api-approved.kubernetes.io": "https://github.com/kubernetes-sigs/scheduler-plugins/pull/50",
                "controller-gen.kubebuilder.io/version": "v0.11.1",
            },
        },
        "spec": {
            "group": "scheduling.x-k8s.io",
            "names": {
                "kind": "PodGroup",
                "listKind": "PodGroupList",
                "plural": "podgroups",
                "shortNames": ["pg", "pgs"],
                "singular": "podgroup",
            },
            "scope": "Namespaced",
            "versions": [
                {
                    "name": "v1alpha1",
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": [
                        {"jsonPath": ".status.phase", "name": "Phase", "type": "string"},
                        {"jsonPath": ".spec.minMember", "name": "MinMember", "type": "integer"},
                        {"jsonPath": ".status.running", "name": "Running", "type": "string"},
                        {"jsonPath": ".status.succeeded", "name": "Succeeded", "type": "string"},
                        {"jsonPath": ".status.failed", "name": "Failed", "type": "string"},
                        {"jsonPath": ".metadata.creationTimestamp", "name": "Age", "type": "date"},
                    ],
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {
                                "apiVersion": {"type": "string"},
                                "kind": {"type": "string"},
                                "metadata": {"type": "object"},
                                "spec": {
                                    "type": "object",
                                    "properties": {
                                        "minMember": _INT32,
                                        "minResources": {"type": "object", "additionalProperties": _QUANTITY},
                                        "scheduleTimeoutSeconds": _INT32,
                                    },
                                },
                                "status": {
                                    "type": "object",
                                    "properties": {
                                        "failed": _INT32,
                                        "occupiedBy": {"type": "string"},
                                        "phase": {"type": "string"},
                                        "running": _INT32,
                                        "scheduleStartTime": {"format": "date-time", "type": "string"},
                                        "succeeded": _INT32,
                                    },
                                },
                            },
                        }
                    },
                }
            ],
        },
    }
