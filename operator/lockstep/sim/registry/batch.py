"""batch: Jobs (v1), as ``pkg/registry/batch/job`` defaults and validates them. Completions and failure
policies are stored and validated but drive nothing: the simulated Job controller only creates pods.

From 1.37, ``spec.scheduling`` (KEP-5547, gate ``WorkloadWithJob``; the field and its
``JobSchedulingConfiguration`` are staging/src/k8s.io/api/batch/v1/types.go, on disk as the
kubernetes-validate 1.37 schema ``jobschedulingconfiguration-batch-v1.json``):

- gate off, the field is dropped on create and update unless the stored Job has it
  (pkg/api/job/util.go ``DropDisabledFields``, called by pkg/registry/batch/job/strategy.go);
- its v1alpha3 building blocks are validated declaratively (``workload_building_block_errors``), and
  as ``workloadbuilder.Validate`` does (staging/src/k8s.io/component-helpers/scheduling/schedulingv1/
  workloadbuilder/validate.go): ``disruptionMode: {all: {}}`` is refused with the Basic policy, which an
  absent ``schedulingPolicy`` resolves to;
- it is immutable, including whether it is set at all: only ``schedulingPolicy.gang.minCount`` may
  change (pkg/apis/batch/validation/validation.go); the basic/gang variant is frozen by a hand-written
  rule whose message was not found in the sources read (``POLICY_SWITCH``).
"""

from __future__ import annotations

from typing import Any

from lockstep.sim import errors as fe
from lockstep.sim.errors import FieldError
from lockstep.sim.features import FeatureGates
from lockstep.sim.objectmeta import validate_name
from lockstep.sim.registry.core import default_pod_template_spec
from lockstep.sim.registry.scheduling.v1beta1 import workload_building_block_errors
from lockstep.sim.resources import ResourceType, Strategy, WriteContext

JsonObject = dict[str, Any]

GROUP = "batch"
CONTROLLER_UID_LABEL = "batch.kubernetes.io/controller-uid"
LEGACY_CONTROLLER_UID_LABEL = "controller-uid"
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
LEGACY_JOB_NAME_LABEL = "job-name"
COMPLETION_MODES = ("NonIndexed", "Indexed")
JOB_RESTART_POLICIES = ("OnFailure", "Never")
# the fields of a Job's spec that may change after creation
MUTABLE_JOB_SPEC = ("parallelism", "completions", "activeDeadlineSeconds", "suspend", "backoffLimit")
SCHEDULING_GATE = "WorkloadWithJob"
POLICY_SWITCH = "may not change between basic and gang"
ALL_WITH_BASIC = "the disruptionMode `all` is not supported with the Basic scheduling policy"


class JobStrategy(Strategy):
    def __init__(self, gates: FeatureGates) -> None:
        self.gates = gates
        # spec.scheduling exists from 1.37 (the 1.36 decoder prunes it as an unknown field)
        self.scheduling = gates.kube_version.minor >= 37
        self.scheduling_enabled = self.scheduling and gates[SCHEDULING_GATE]

    def default(self, rt: ResourceType, obj: JsonObject, old: JsonObject | None) -> None:
        spec = obj.get("spec")
        if not isinstance(spec, dict):
            return
        if (
            self.scheduling
            and not self.scheduling_enabled
            and ((old or {}).get("spec") or {}).get("scheduling") is None
        ):
            spec.pop("scheduling", None)
        meta = obj["metadata"]
        template = spec.setdefault("template", {})
        if not isinstance(template, dict):
            return
        if old is None and not spec.get("manualSelector"):
            uid, name = meta["uid"], meta.get("name", "")
            spec["selector"] = {"matchLabels": {CONTROLLER_UID_LABEL: uid}}
            labels = template.setdefault("metadata", {}).setdefault("labels", {})
            labels.update(
                {
                    CONTROLLER_UID_LABEL: uid,
                    JOB_NAME_LABEL: name,
                    LEGACY_CONTROLLER_UID_LABEL: uid,
                    LEGACY_JOB_NAME_LABEL: name,
                }
            )
            spec["manualSelector"] = False
        if old is None and not meta.get("labels"):
            labels = (template.get("metadata") or {}).get("labels")
            if labels:
                meta["labels"] = dict(labels)
        completion_mode = spec.setdefault("completionMode", "NonIndexed")
        if spec.get("completions") is None and spec.get("parallelism") is None:
            spec["completions"] = 1
        spec.setdefault("parallelism", 1)
        if completion_mode == "Indexed" and spec.get("backoffLimitPerIndex") is not None:
            spec.setdefault("backoffLimit", 2**31 - 1)
        spec.setdefault("backoffLimit", 6)
        spec.setdefault("suspend", False)
        spec.setdefault(
            "podReplacementPolicy", "Failed" if spec.get("podFailurePolicy") else "TerminatingOrFailed"
        )
        if isinstance(template.get("spec"), dict):
            default_pod_template_spec(template["spec"])
        obj.setdefault("status", {})

    def validate(
        self, rt: ResourceType, obj: JsonObject, old: JsonObject | None, ctx: WriteContext
    ) -> list[FieldError]:
        if ctx.subresource:
            return []
        spec = obj.get("spec") or {}
        errors = self._validate_spec(spec)
        if old is None:
            if self.scheduling:
                errors += self._validate_scheduling(spec.get("scheduling"), None, False)
            return validate_name(obj["metadata"].get("name")) + errors
        old_spec = old.get("spec") or {}
        for key in sorted(set(spec) | set(old_spec)):
            if self.scheduling and key == "scheduling":
                continue
            if key not in MUTABLE_JOB_SPEC and spec.get(key) != old_spec.get(key):
                errors.append(fe.invalid(f"spec.{key}", spec.get(key), "field is immutable"))
        if self.scheduling:
            errors += self._validate_scheduling(spec.get("scheduling"), old_spec.get("scheduling"), True)
        indexed = spec.get("completionMode") == "Indexed"
        if (
            indexed
            and spec.get("completions") != old_spec.get("completions")
            and spec.get("parallelism") == old_spec.get("parallelism")
        ):
            errors.append(
                fe.invalid(
                    "spec.completions",
                    spec.get("completions"),
                    "can only be modified in tandem with spec.parallelism",
                )
            )
        return errors

    def _validate_scheduling(self, new: Any, old: Any, updating: bool) -> list[FieldError]:
        path = "spec.scheduling"
        if updating and new != old:
            if old is None:
                return [fe.invalid(path, None, "field cannot be set once created")]
            if new is None:
                return [fe.invalid(path, None, "field cannot be cleared once set")]
        if not isinstance(new, dict) or (updating and new == old):
            return []
        errors = workload_building_block_errors(self.gates, path, new, old if updating else None)
        policy = new.get("schedulingPolicy")
        old_policy = (old or {}).get("schedulingPolicy") if updating else None
        if (
            isinstance(policy, dict)
            and isinstance(old_policy, dict)
            and (policy.get("gang") is None) != (old_policy.get("gang") is None)
        ):
            errors.append(fe.forbidden(f"{path}.schedulingPolicy", POLICY_SWITCH))
        basic = not isinstance(policy, dict) or policy.get("gang") is None
        if basic and ((new.get("disruptionMode") or {}).get("all") is not None):
            errors.append(fe.invalid(f"{path}.disruptionMode", "", ALL_WITH_BASIC))
        return errors

    @staticmethod
    def _validate_spec(spec: JsonObject) -> list[FieldError]:
        errors: list[FieldError] = []
        for key in ("parallelism", "completions", "backoffLimit"):
            value = spec.get(key)
            if value is not None and (not isinstance(value, int) or value < 0):
                errors.append(fe.invalid(f"spec.{key}", value, "must be greater than or equal to 0"))
        mode = spec.get("completionMode")
        if mode not in COMPLETION_MODES:
            errors.append(fe.not_supported("spec.completionMode", mode, list(COMPLETION_MODES)))
        elif mode == "Indexed" and spec.get("completions") is None:
            errors.append(fe.required("spec.completions", "when completion mode is Indexed"))
        template = spec.get("template") or {}
        pod_spec = template.get("spec") or {}
        if not pod_spec.get("containers"):
            errors.append(fe.required("spec.template.spec.containers"))
        if pod_spec.get("restartPolicy") not in JOB_RESTART_POLICIES:
            errors.append(
                fe.required("spec.template.spec.restartPolicy", 'valid values: "OnFailure", "Never"')
            )
        selector = (spec.get("selector") or {}).get("matchLabels") or {}
        labels = (template.get("metadata") or {}).get("labels") or {}
        if any(labels.get(k) != v for k, v in selector.items()):
            errors.append(
                fe.invalid(
                    "spec.template.metadata.labels", labels, "`selector` does not match template `labels`"
                )
            )
        return errors


def batch_types(gates: FeatureGates) -> list[ResourceType]:
    return [
        ResourceType(
            GROUP,
            "v1",
            "jobs",
            "job",
            "Job",
            True,
            JobStrategy(gates),
            categories=("all",),
            subresources=("status",),
            has_generation=True,
            smp_lists={},
        ),
    ]
