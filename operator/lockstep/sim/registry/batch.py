"""batch: Jobs (v1), as ``pkg/registry/batch/job`` defaults and validates them. Completions and failure
policies are stored and validated but drive nothing: the simulated Job controller only creates pods."""

from __future__ import annotations

from typing import Any

from lockstep.sim import errors as fe
from lockstep.sim.errors import FieldError
from lockstep.sim.objectmeta import validate_name
from lockstep.sim.registry.core import default_pod_template_spec
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


class JobStrategy(Strategy):
    def default(self, rt: ResourceType, obj: JsonObject, old: JsonObject | None) -> None:
        spec = obj.get("spec")
        if not isinstance(spec, dict):
            return
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
            return validate_name(obj["metadata"].get("name")) + errors
        old_spec = old.get("spec") or {}
        for key in sorted(set(spec) | set(old_spec)):
            if key not in MUTABLE_JOB_SPEC and spec.get(key) != old_spec.get(key):
                errors.append(fe.invalid(f"spec.{key}", spec.get(key), "field is immutable"))
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


def batch_types() -> list[ResourceType]:
    return [
        ResourceType(
            GROUP,
            "v1",
            "jobs",
            "job",
            "Job",
            True,
            JobStrategy(),
            categories=("all",),
            subresources=("status",),
            has_generation=True,
            smp_lists={},
        ),
    ]
