"""UnsupportedPodSpec: a pod that sets a field which affects placement and that lockstep does not
implement (``REFUSED`` in ``api/pod_fields.py``) is not placed, rather than placed as if the field
were not there. Its PodScheduled condition gets the reason ``UnsupportedPodSpec`` and names the field."""

from __future__ import annotations

from typing import ClassVar

from lockstep.api.pod_fields import refused_because
from lockstep.scheduler.framework import SKIP, CycleState, PodInfo, Status

UNSUPPORTED_POD_SPEC = "UnsupportedPodSpec"


class UnsupportedPodSpec:
    name: ClassVar[str] = UNSUPPORTED_POD_SPEC

    def pre_filter(self, state: CycleState, pod: PodInfo) -> Status:
        if pod.placement is None or not pod.placement.unsupported:
            return SKIP
        reasons = []
        for field in pod.placement.unsupported:
            plugin = refused_because(field)
            reasons.append(
                f"{field} is not supported by lockstep" + (f" (kube-scheduler's {plugin})" if plugin else "")
            )
        return Status.unresolvable(self.name, UNSUPPORTED_POD_SPEC, *reasons)
