"""CustomResourceDefinition documents of the workload operators the emulator can serve (JobSet,
LeaderWorkerSet, Kubeflow, Ray): each project's published schema, trimmed to the fields lockstep and
the simulated controllers read, with their names, types and defaults. An embedded pod or Job template
and the rest of a spec are kept as written (``x-kubernetes-preserve-unknown-fields``), never pruned.

Unlike the built-in kinds they are not served from the start: ``SimCluster(owner_crds=...)`` or
``SimCluster.install_owner_crd`` creates them, as installing the operator's CRDs would."""

from __future__ import annotations

from typing import Any

JsonObject = dict[str, Any]

KEPT: JsonObject = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}


def int32(default: int | None = None, minimum: int | None = None) -> JsonObject:
    schema: JsonObject = {"type": "integer", "format": "int32"}
    if default is not None:
        schema["default"] = default
    if minimum is not None:
        schema["minimum"] = minimum
    return schema


def string(default: str | None = None, enum: list[str] | None = None) -> JsonObject:
    schema: JsonObject = {"type": "string"}
    if default is not None:
        schema["default"] = default
    if enum is not None:
        schema["enum"] = enum
    return schema


def obj(properties: JsonObject, required: list[str] | None = None, keep: bool = False) -> JsonObject:
    schema: JsonObject = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    if keep:
        schema["x-kubernetes-preserve-unknown-fields"] = True
    return schema


def definition(
    group: str,
    version: str,
    kind: str,
    plural: str,
    spec: JsonObject,
    *,
    short_names: list[str] | None = None,
    scale: JsonObject | None = None,
) -> JsonObject:
    names: JsonObject = {"plural": plural, "singular": kind.lower(), "kind": kind, "listKind": f"{kind}List"}
    if short_names:
        names["shortNames"] = short_names
    subresources: JsonObject = {"status": {}}
    if scale:
        subresources["scale"] = scale
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": names,
            "versions": [
                {
                    "name": version,
                    "served": True,
                    "storage": True,
                    "subresources": subresources,
                    "schema": {
                        "openAPIV3Schema": obj(
                            {
                                "apiVersion": {"type": "string"},
                                "kind": {"type": "string"},
                                "metadata": {"type": "object"},
                                "spec": spec,
                                "status": KEPT,
                            }
                        )
                    },
                }
            ],
        },
    }
