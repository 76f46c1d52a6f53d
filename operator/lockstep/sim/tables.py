"""``Table`` responses (``Accept: application/json;as=Table;g=meta.k8s.io;v=v1``) as kubectl asks for them."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

JsonObject = dict[str, Any]
Row = list[Any]

NAME_DESCRIPTION = (
    "Name must be unique within a namespace. Is required when creating resources, although some resources "
    "may allow a client to request the generation of an appropriate name automatically. Name is primarily "
    "intended for creation idempotence and configuration definition. Cannot be updated. More info: "
    "https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names"
)
AGE_DESCRIPTION = (
    "CreationTimestamp is a timestamp representing the server time when this object was created. It is "
    "not guaranteed to be set in happens-before order across separate operations. Clients may not set this "
    "value. It is represented in RFC3339 form and is in UTC.\n\nPopulated by the system. Read-only. Null "
    "for lists. More info: "
    "https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata"
)


def column(
    name: str, col_type: str = "string", description: str = "", priority: int = 0, fmt: str = ""
) -> JsonObject:
    return {"name": name, "type": col_type, "format": fmt, "description": description, "priority": priority}


NAME_COLUMN = column("Name", "string", NAME_DESCRIPTION, 0, "name")


def human_duration(seconds: float) -> str:
    """kubectl's ``duration.HumanDuration``."""
    if seconds < -1:
        return "<invalid>"
    s = max(int(seconds), 0)
    if s < 120:
        return f"{s}s"
    minutes = s // 60
    if minutes < 10:
        rest = s % 60
        return f"{minutes}m{rest}s" if rest else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    hours = s // 3600
    if hours < 8:
        rest = minutes % 60
        return f"{hours}h{rest}m" if rest else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    days = hours // 24
    if hours < 192:
        rest = hours % 24
        return f"{days}d{rest}h" if rest else f"{days}d"
    if days < 365 * 2:
        return f"{days}d"
    years = days // 365
    if days < 365 * 8:
        rest = days % 365
        return f"{years}y{rest}d" if rest else f"{years}y"
    return f"{years}y"


def age(timestamp: Any) -> str:
    if not isinstance(timestamp, str) or not timestamp:
        return "<unknown>"
    try:
        created = datetime.strptime(timestamp[:19], "%Y-%m-%dT%H:%M:%S").replace(tzinfo=UTC)
    except ValueError:
        return "<unknown>"
    return human_duration((datetime.now(UTC) - created).total_seconds())


_SEGMENT = re.compile(
    r"\.([A-Za-z0-9_\-]+)|\[(\d+)\]|\['([^']+)'\]|\[\?\(@\.([A-Za-z0-9_\-]+)==[\"']([^\"']*)[\"']\)\]"
)


def json_path(obj: Any, path: str) -> Any:
    """The subset of JSONPath CRD printer columns use: ``.a.b``, ``.a[0].b``, ``.a['x.y']``, and a
    filter ``.a[?(@.type=="X")].b``, whose first match is shown (as kube-apiserver's table convertor
    prints the first result)."""
    value = obj
    for match in _SEGMENT.finditer(path.strip().lstrip("{").rstrip("}")):
        key, index, quoted, field, wanted = match.groups()
        if field is not None:
            if not isinstance(value, list):
                return None
            value = next((v for v in value if isinstance(v, dict) and v.get(field) == wanted), None)
        elif index is not None:
            if not isinstance(value, list) or int(index) >= len(value):
                return None
            value = value[int(index)]
        else:
            if not isinstance(value, dict):
                return None
            value = value.get(key if key is not None else quoted)
        if value is None:
            return None
    return value


def custom_columns(printer_columns: list[JsonObject]) -> tuple[list[JsonObject], Callable[[JsonObject], Row]]:
    if not printer_columns:
        printer_columns = [{"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}]
    definitions = [NAME_COLUMN]
    for pc in printer_columns:
        description = (
            pc.get("description")
            or f"Custom resource definition column (in JSONPath format): {pc['jsonPath']}"
        )
        definitions.append(
            column(
                pc["name"], pc.get("type", "string"), description, pc.get("priority", 0), pc.get("format", "")
            )
        )

    def cells(obj: JsonObject) -> Row:
        row: Row = [obj["metadata"].get("name")]
        for pc in printer_columns:
            value = json_path(obj, pc["jsonPath"])
            if pc.get("type") == "date" and value is not None:
                value = age(value)
            elif isinstance(value, dict | list):
                value = str(value)
            row.append(value)
        return row

    return definitions, cells


def _pod_cells(pod: JsonObject) -> Row:
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    containers = spec.get("containers") or []
    statuses = status.get("containerStatuses") or []
    ready = sum(1 for s in statuses if s.get("ready"))
    restarts = sum(int(s.get("restartCount") or 0) for s in statuses)
    reason = status.get("reason") or status.get("phase") or "Unknown"
    for s in statuses:
        waiting = (s.get("state") or {}).get("waiting") or {}
        if waiting.get("reason"):
            reason = waiting["reason"]
    if any(
        c.get("type") == "PodScheduled" and c.get("reason") == "SchedulingGated"
        for c in status.get("conditions") or []
    ):
        reason = "SchedulingGated"
    if pod["metadata"].get("deletionTimestamp"):
        reason = "Terminating"
    return [
        pod["metadata"].get("name"),
        f"{ready}/{len(containers)}",
        reason,
        str(restarts),
        age(pod["metadata"].get("creationTimestamp")),
        status.get("podIP") or "<none>",
        spec.get("nodeName") or "<none>",
        status.get("nominatedNodeName") or "<none>",
        "<none>",
    ]


def _node_cells(node: JsonObject) -> Row:
    status = node.get("status") or {}
    ready = next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"), None)
    state = "Unknown" if ready is None else ("Ready" if ready.get("status") == "True" else "NotReady")
    if (node.get("spec") or {}).get("unschedulable"):
        state += ",SchedulingDisabled"
    labels = node["metadata"].get("labels") or {}
    roles = sorted(
        k.split("/", 1)[1] for k in labels if k.startswith("node-role.kubernetes.io/") and "/" in k
    )
    info = status.get("nodeInfo") or {}
    addresses = {a.get("type"): a.get("address") for a in status.get("addresses") or []}
    return [
        node["metadata"].get("name"),
        state,
        ",".join(roles) or "<none>",
        age(node["metadata"].get("creationTimestamp")),
        info.get("kubeletVersion") or "",
        addresses.get("InternalIP") or "<none>",
        addresses.get("ExternalIP") or "<none>",
        info.get("osImage") or "<unknown>",
        info.get("kernelVersion") or "<unknown>",
        info.get("containerRuntimeVersion") or "<unknown>",
    ]


def _claim_state(claim: JsonObject) -> str:
    status = claim.get("status") or {}
    parts = ["allocated" if status.get("allocation") else "pending"]
    if status.get("reservedFor"):
        parts.append("reserved")
    if claim["metadata"].get("deletionTimestamp"):
        parts.append("deleted")
    return ",".join(parts)


def _event_cells(event: JsonObject) -> Row:
    involved = event.get("involvedObject") or {}
    last = event.get("lastTimestamp") or event.get("eventTime") or event["metadata"].get("creationTimestamp")
    source = (event.get("source") or {}).get("component") or event.get("reportingComponent") or ""
    return [
        age(last),
        event.get("type", ""),
        event.get("reason", ""),
        f"{str(involved.get('kind', '')).lower()}/{involved.get('name', '')}",
        involved.get("fieldPath", ""),
        source,
        event.get("message", ""),
        age(event.get("firstTimestamp") or event.get("eventTime")),
        str(event.get("count", 1)),
        event["metadata"].get("name"),
    ]


BUILTIN_TABLES: dict[str, tuple[list[JsonObject], Callable[[JsonObject], Row]]] = {
    "/pods": (
        [
            NAME_COLUMN,
            column("Ready", "string", "The aggregate readiness state of this pod for accepting traffic."),
            column("Status", "string", "The aggregate status of the containers in this pod."),
            column(
                "Restarts",
                "string",
                "The number of times the containers in this pod have been restarted and when the last "
                "container in this pod has restarted.",
            ),
            column("Age", "string", AGE_DESCRIPTION),
            column(
                "IP",
                "string",
                "IP address allocated to the pod. Routable at least within the cluster. "
                "Empty if not yet allocated.",
                1,
            ),
            column("Node", "string", "NodeName is a request to schedule this pod onto a specific node.", 1),
            column(
                "Nominated Node",
                "string",
                "nominatedNodeName is set only when this pod preempts other pods on the node.",
                1,
            ),
            column(
                "Readiness Gates",
                "string",
                "If specified, all readiness gates will be evaluated for pod readiness.",
                1,
            ),
        ],
        _pod_cells,
    ),
    "/nodes": (
        [
            NAME_COLUMN,
            column("Status", "string", "The status of the node"),
            column("Roles", "string", "The roles of the node"),
            column("Age", "string", AGE_DESCRIPTION),
            column("Version", "string", "Kubelet Version reported by the node."),
            column(
                "Internal-IP",
                "string",
                "List of addresses reachable to the node. Queried from cloud provider, if available.",
                1,
            ),
            column(
                "External-IP",
                "string",
                "List of addresses reachable to the node. Queried from cloud provider, if available.",
                1,
            ),
            column(
                "OS-Image",
                "string",
                "OS Image reported by the node from /etc/os-release (e.g. Debian GNU/Linux 7 (wheezy)).",
                1,
            ),
            column(
                "Kernel-Version",
                "string",
                "Kernel Version reported by the node from 'uname -r' (e.g. 3.16.0-0.bpo.4-amd64).",
                1,
            ),
            column(
                "Container-Runtime",
                "string",
                "ContainerRuntime Version reported by the node through runtime remote API (e.g. containerd://1.4.2).",
                1,
            ),
        ],
        _node_cells,
    ),
    "/events": (
        [
            column("Last Seen", "string", "Time when this event was last observed."),
            column("Type", "string", "Type of this event (Normal, Warning)."),
            column(
                "Reason",
                "string",
                "Short, machine understandable string that gives the reason for the event.",
            ),
            column("Object", "string", "The object this event is about."),
            column("Subobject", "string", "The part of the object this event is about.", 1),
            column("Source", "string", "The component reporting this event.", 1),
            column("Message", "string", "A human-readable description of the status of this operation."),
            column("First Seen", "string", "Time when this event was first observed.", 1),
            column("Count", "string", "The number of times this event has occurred.", 1),
            {**NAME_COLUMN, "priority": 1},
        ],
        _event_cells,
    ),
    "/namespaces": (
        [
            NAME_COLUMN,
            column("Status", "string", "The status of the namespace"),
            column("Age", "string", AGE_DESCRIPTION),
        ],
        lambda o: [
            o["metadata"].get("name"),
            (o.get("status") or {}).get("phase", ""),
            age(o["metadata"].get("creationTimestamp")),
        ],
    ),
    "coordination.k8s.io/leases": (
        [
            NAME_COLUMN,
            column("Holder", "string", "The holder of the lease"),
            column("Age", "string", AGE_DESCRIPTION),
        ],
        lambda o: [
            o["metadata"].get("name"),
            (o.get("spec") or {}).get("holderIdentity", ""),
            age(o["metadata"].get("creationTimestamp")),
        ],
    ),
    "resource.k8s.io/resourceclaims": (
        [
            NAME_COLUMN,
            column("State", "string", "A summary of the current state (allocated, pending, reserved, etc.)."),
            column("Age", "string", AGE_DESCRIPTION),
        ],
        lambda o: [o["metadata"].get("name"), _claim_state(o), age(o["metadata"].get("creationTimestamp"))],
    ),
    "resource.k8s.io/resourceslices": (
        [
            NAME_COLUMN,
            column("Node", "string", "The node that provides the devices."),
            column("Driver", "string", "The DRA driver that provides the devices."),
            column("Pool", "string", "The pool the devices belong to."),
            column("Age", "string", AGE_DESCRIPTION),
        ],
        lambda o: [
            o["metadata"].get("name"),
            (o.get("spec") or {}).get("nodeName") or "<none>",
            (o.get("spec") or {}).get("driver", ""),
            ((o.get("spec") or {}).get("pool") or {}).get("name", ""),
            age(o["metadata"].get("creationTimestamp")),
        ],
    ),
}
DEFAULT_TABLE: tuple[list[JsonObject], Callable[[JsonObject], Row]] = (
    [NAME_COLUMN, column("Age", "string", AGE_DESCRIPTION)],
    lambda o: [o["metadata"].get("name"), age(o["metadata"].get("creationTimestamp"))],
)


def table(
    definitions: list[JsonObject],
    cells: Callable[[JsonObject], Row],
    objects: list[JsonObject],
    list_meta: JsonObject,
    table_version: str,
    include_object: str,
) -> JsonObject:
    api_version = f"meta.k8s.io/{table_version}"
    rows = []
    for obj in objects:
        row: JsonObject = {"cells": cells(obj)}
        if include_object == "Object":
            row["object"] = obj
        elif include_object != "None":
            row["object"] = {
                "kind": "PartialObjectMetadata",
                "apiVersion": api_version,
                "metadata": obj["metadata"],
            }
        rows.append(row)
    return {
        "kind": "Table",
        "apiVersion": api_version,
        "metadata": list_meta,
        "columnDefinitions": definitions,
        "rows": rows,
    }
