"""apimachinery's ``diff.Diff`` of internal API structs, as kube-apiserver appends it to some 422 messages.

The real server marshals the *internal* Go struct (no JSON tags: Go field names, every field present,
nil as ``null``) with one-space indentation and prints a unified diff with three lines of context.
Each struct is described by a table of (JSON name, Go name, nested table or None); a nested table on
a list describes its items. Fields the table does not know are rendered with their JSON names.
"""

from __future__ import annotations

import difflib
import json
from typing import Any

FieldTable = tuple[tuple[str, str, Any], ...]

_ZERO_STRING = ""

RESOURCE_REQUIREMENTS: FieldTable = (
    ("limits", "Limits", None),
    ("requests", "Requests", None),
    ("claims", "Claims", None),
)
CONTAINER: FieldTable = (
    ("name", "Name", _ZERO_STRING),
    ("image", "Image", _ZERO_STRING),
    ("command", "Command", None),
    ("args", "Args", None),
    ("workingDir", "WorkingDir", _ZERO_STRING),
    ("ports", "Ports", None),
    ("envFrom", "EnvFrom", None),
    ("env", "Env", None),
    ("resources", "Resources", RESOURCE_REQUIREMENTS),
    ("resizePolicy", "ResizePolicy", None),
    ("restartPolicy", "RestartPolicy", None),
    ("restartPolicyRules", "RestartPolicyRules", None),
    ("volumeMounts", "VolumeMounts", None),
    ("volumeDevices", "VolumeDevices", None),
    ("livenessProbe", "LivenessProbe", None),
    ("readinessProbe", "ReadinessProbe", None),
    ("startupProbe", "StartupProbe", None),
    ("lifecycle", "Lifecycle", None),
    ("terminationMessagePath", "TerminationMessagePath", _ZERO_STRING),
    ("terminationMessagePolicy", "TerminationMessagePolicy", _ZERO_STRING),
    ("imagePullPolicy", "ImagePullPolicy", _ZERO_STRING),
    ("securityContext", "SecurityContext", None),
    ("stdin", "Stdin", False),
    ("stdinOnce", "StdinOnce", False),
    ("tty", "TTY", False),
)
TOLERATION: FieldTable = (
    ("key", "Key", _ZERO_STRING),
    ("operator", "Operator", _ZERO_STRING),
    ("value", "Value", _ZERO_STRING),
    ("effect", "Effect", _ZERO_STRING),
    ("tolerationSeconds", "TolerationSeconds", None),
)
# The internal PodSecurityContext also holds the external spec's host namespace fields.
POD_SECURITY_CONTEXT: FieldTable = (
    ("hostNetwork", "HostNetwork", False),
    ("hostPID", "HostPID", False),
    ("hostIPC", "HostIPC", False),
    ("shareProcessNamespace", "ShareProcessNamespace", None),
    ("hostUsers", "HostUsers", None),
    ("seLinuxOptions", "SELinuxOptions", None),
    ("windowsOptions", "WindowsOptions", None),
    ("runAsUser", "RunAsUser", None),
    ("runAsGroup", "RunAsGroup", None),
    ("runAsNonRoot", "RunAsNonRoot", None),
    ("supplementalGroups", "SupplementalGroups", None),
    ("supplementalGroupsPolicy", "SupplementalGroupsPolicy", None),
    ("fsGroup", "FSGroup", None),
    ("fsGroupChangePolicy", "FSGroupChangePolicy", None),
    ("sysctls", "Sysctls", None),
    ("seccompProfile", "SeccompProfile", None),
    ("appArmorProfile", "AppArmorProfile", None),
    ("seLinuxChangePolicy", "SELinuxChangePolicy", None),
)
SCHEDULING_GROUP: FieldTable = (("podGroupName", "PodGroupName", None),)
POD_SPEC: FieldTable = (
    ("volumes", "Volumes", None),
    ("initContainers", "InitContainers", CONTAINER),
    ("containers", "Containers", CONTAINER),
    ("ephemeralContainers", "EphemeralContainers", None),
    ("restartPolicy", "RestartPolicy", _ZERO_STRING),
    ("terminationGracePeriodSeconds", "TerminationGracePeriodSeconds", None),
    ("activeDeadlineSeconds", "ActiveDeadlineSeconds", None),
    ("dnsPolicy", "DNSPolicy", _ZERO_STRING),
    ("nodeSelector", "NodeSelector", None),
    ("serviceAccountName", "ServiceAccountName", _ZERO_STRING),
    ("automountServiceAccountToken", "AutomountServiceAccountToken", None),
    ("nodeName", "NodeName", _ZERO_STRING),
    ("securityContext", "SecurityContext", POD_SECURITY_CONTEXT),
    ("imagePullSecrets", "ImagePullSecrets", None),
    ("hostname", "Hostname", _ZERO_STRING),
    ("subdomain", "Subdomain", _ZERO_STRING),
    ("setHostnameAsFQDN", "SetHostnameAsFQDN", None),
    ("affinity", "Affinity", None),
    ("schedulerName", "SchedulerName", _ZERO_STRING),
    ("tolerations", "Tolerations", TOLERATION),
    ("hostAliases", "HostAliases", None),
    ("priorityClassName", "PriorityClassName", _ZERO_STRING),
    ("priority", "Priority", None),
    ("preemptionPolicy", "PreemptionPolicy", None),
    ("dnsConfig", "DNSConfig", None),
    ("readinessGates", "ReadinessGates", None),
    ("runtimeClassName", "RuntimeClassName", None),
    ("overhead", "Overhead", None),
    ("enableServiceLinks", "EnableServiceLinks", None),
    ("topologySpreadConstraints", "TopologySpreadConstraints", None),
    ("os", "OS", None),
    ("schedulingGates", "SchedulingGates", None),
    ("resourceClaims", "ResourceClaims", None),
    ("resources", "Resources", RESOURCE_REQUIREMENTS),
    ("hostnameOverride", "HostnameOverride", None),
    ("schedulingGroup", "SchedulingGroup", SCHEDULING_GROUP),
)
_POD_HOST_FIELDS = ("hostNetwork", "hostPID", "hostIPC", "shareProcessNamespace", "hostUsers")


def go_struct(value: Any, table: FieldTable) -> Any:
    """The internal struct a JSON object decodes to, keyed by Go field names (lists: item by item)."""
    if value is None:
        return None
    if isinstance(value, list):
        return [go_struct(item, table) for item in value]
    if not isinstance(value, dict):
        return value
    out: dict[str, Any] = {}
    for json_name, go_name, nested in table:
        field = value.get(json_name)
        if isinstance(nested, tuple):
            out[go_name] = go_struct(field, nested)
        else:
            out[go_name] = nested if field is None else field
    return out


def internal_pod_spec(spec: dict[str, Any]) -> dict[str, Any]:
    """The external PodSpec as the internal one: host namespace fields live in the security context."""
    converted = dict(spec)
    security = dict(converted.get("securityContext") or {})
    for key in _POD_HOST_FIELDS:
        if key in converted:
            security[key] = converted.pop(key)
    converted["securityContext"] = security
    return go_struct(converted, POD_SPEC)


def object_diff(old: Any, new: Any) -> str:
    """``diff.Diff(old, new)``: a unified diff of the indented JSON dumps, without file headers."""
    old_lines = json.dumps(old, indent=1).splitlines()
    new_lines = json.dumps(new, indent=1).splitlines()
    lines = list(difflib.unified_diff(old_lines, new_lines, n=3, lineterm=""))[2:]
    return "".join(line + "\n" for line in lines)
