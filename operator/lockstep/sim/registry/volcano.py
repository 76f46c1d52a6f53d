"""scheduling.volcano.sh (Volcano): the PodGroup CRD as published in volcano-sh/volcano
``config/crd/volcano/bases/scheduling.volcano.sh_podgroups.yaml`` (no status subresource: Volcano
writes the status with the object), with ``spec.networkTopology`` of volcano-sh/apis
``pkg/apis/scheduling/v1beta1/types.go``; served through the emulator's CustomResourceDefinition
support when a test or the demo installs it (``SimCluster(install_crds=("volcano",))``)."""

from __future__ import annotations

from typing import Any

from lockstep.sim.registry.coscheduling import _INT32, _QUANTITY

NAME = "podgroups.scheduling.volcano.sh"

_CONDITION = {
    "type": "object",
    "properties": {
        "lastTransitionTime": {"format": "date-time", "type": "string"},
        "message": {"type": "string"},
        "reason": {"type": "string"},
        "status": {"type": "string"},
        "transitionID": {"type": "string"},
        "type": {"type": "string"},
    },
}


def crd() -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": NAME, "annotations": {"controller-gen.kubebuilder.io/version": "v0.6.0"}},
        "spec": {
            "group": "scheduling.volcano.sh",
            "names": {
                "kind": "PodGroup",
                "listKind": "PodGroupList",
                "plural": "podgroups",
                "shortNames": ["pg", "podgroup-v1beta1"],
                "singular": "podgroup",
            },
            "scope": "Namespaced",
            "versions": [
                {
                    "name": "v1beta1",
                    "served": True,
                    "storage": True,
                    "subresources": {},
                    "additionalPrinterColumns": [
                        {"jsonPath": ".status.phase", "name": "STATUS", "type": "string"},
                        {"jsonPath": ".spec.minMember", "name": "minMember", "type": "integer"},
                        {"jsonPath": ".status.running", "name": "RUNNINGS", "type": "integer"},
                        {"jsonPath": ".metadata.creationTimestamp", "name": "AGE", "type": "date"},
                        {"jsonPath": ".spec.queue", "name": "QUEUE", "priority": 1, "type": "string"},
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
                                        "minTaskMember": {"type": "object", "additionalProperties": _INT32},
                                        "networkTopology": {
                                            "type": "object",
                                            "properties": {
                                                "highestTierAllowed": {"default": 1, "type": "integer"},
                                                "mode": {
                                                    "default": "hard",
                                                    "enum": ["hard", "soft"],
                                                    "type": "string",
                                                },
                                            },
                                        },
                                        "priorityClassName": {"type": "string"},
                                        "queue": {"type": "string"},
                                    },
                                },
                                "status": {
                                    "type": "object",
                                    "properties": {
                                        "conditions": {"type": "array", "items": _CONDITION},
                                        "failed": _INT32,
                                        "phase": {"type": "string"},
                                        "running": _INT32,
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
