"""A simulated DRA driver, ``gpu.sim.lockstep.dev``: one ResourceSlice per node and a DeviceClass.

Device ``gpu-i`` of a node with D devices has the scalar attributes ``model``, ``index`` and
``driverVersion``, the capacity ``memory: 80Gi`` and the list attribute ``numaNodes`` (KEP-5491
``ints``). Its home NUMA node is ``i*2//D`` and the list also holds the home of its right neighbour
``(i+1) % D``, so the devices at a NUMA boundary sit on both nodes: with D=8, gpu-0..2 are on [0],
gpu-3 on [0, 1], gpu-4..6 on [1] and gpu-7 on [0, 1]. A ``matchAttribute`` over ``numaNodes``
therefore accepts {gpu-3, gpu-4} but not {gpu-0, gpu-4}. On a cluster without the
``DRAListTypeAttributes`` gate, which refuses list attributes, the driver leaves ``numaNodes`` out.

Like a kubelet plugin, the driver keeps its slices published: it watches them and re-creates any
that disappear.

Devices of this driver published with ``bindingConditions`` (by a test, or ``extra_devices``) are
attached as a driver with binding conditions would: once a claim is allocated such a device, the driver
reports the device's conditions in the claim's ``status.devices`` after ``attach_seconds``: every
binding condition True, or, for a device whose attribute ``attachFails`` is true, its first binding
failure condition True.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence

import structlog

from lockstep.sim.objectmeta import now_rfc3339
from lockstep.sim.watching import ApiError, Informer, JsonObject, KubeHttp, WorkQueue

log = structlog.get_logger("lockstep.sim.controllers.dra_driver")

DRIVER_NAME = "gpu.sim.lockstep.dev"
DEVICE_CLASS_NAME = DRIVER_NAME
DEVICE_MODEL = "sim-a100"
DEVICE_MEMORY = "80Gi"
DRIVER_VERSION = "1.2.0"
SLICES_PATH = "/apis/resource.k8s.io/v1/resourceslices"
CLAIMS_PATH = "/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims/{name}/status"
ATTACH_FAILS_ATTRIBUTE = "attachFails"
DEVICE_CLASSES_PATH = "/apis/resource.k8s.io/v1/deviceclasses"


def numa_nodes(index: int, devices: int) -> list[int]:
    home = index * 2 // devices
    neighbour = ((index + 1) % devices) * 2 // devices
    return sorted({home, neighbour})


def device(index: int, devices: int, list_attributes: bool = True) -> JsonObject:
    attributes: JsonObject = {
        "model": {"string": DEVICE_MODEL},
        "index": {"int": index},
        "driverVersion": {"version": DRIVER_VERSION},
    }
    if list_attributes:
        attributes["numaNodes"] = {"ints": numa_nodes(index, devices)}
    return {
        "name": f"gpu-{index}",
        "attributes": attributes,
        "capacity": {"memory": {"value": DEVICE_MEMORY}},
    }


def slice_name(node_name: str) -> str:
    return f"{node_name}-{DRIVER_NAME}"


def resource_slice(node_name: str, devices: int, list_attributes: bool = True) -> JsonObject:
    """The one ResourceSlice of ``node_name``'s pool (pool = node name, generation 1, one slice).
    Without ``list_attributes`` (a cluster without DRAListTypeAttributes) it has no ``numaNodes``."""
    if devices < 1:
        raise ValueError(
            f"ResourceSlice {slice_name(node_name)}: devices per node must be at least 1, got {devices}"
        )
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": slice_name(node_name)},
        "spec": {
            "driver": DRIVER_NAME,
            "nodeName": node_name,
            "pool": {"name": node_name, "generation": 1, "resourceSliceCount": 1},
            "devices": [device(i, devices, list_attributes) for i in range(devices)],
        },
    }


def device_class() -> JsonObject:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": DEVICE_CLASS_NAME},
        "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER_NAME}"'}}]},
    }


class DraDriver:
    """Publishes the DeviceClass and one slice per node, and re-publishes slices that go away."""

    def __init__(
        self,
        http: KubeHttp,
        node_names: Sequence[str],
        devices_per_node: int,
        list_attributes: bool = True,
        claims: Informer | None = None,
        attach_seconds: float = 0.2,
    ) -> None:
        """``claims``: an informer of ResourceClaims; with it the driver reports binding conditions."""
        self.http = http
        self.attach_seconds = attach_seconds
        self._attaching: dict[str, asyncio.Task[None]] = {}
        if claims is not None:
            claims.add_handler(self._on_claim_event)
        self.devices_per_node = devices_per_node
        self.list_attributes = list_attributes
        self._wanted = {slice_name(node): node for node in node_names}
        self._informer = Informer(http, SLICES_PATH, field_selector=f"spec.driver={DRIVER_NAME}")
        self._informer.add_handler(self._on_slice_event)
        self._queue = WorkQueue(self._sync_slice, workers=4, name="dra-driver")
        self._watch_task: asyncio.Task[None] | None = None
        self._all_published = asyncio.Event()
        self._missing = set(self._wanted)

    async def start(self) -> None:
        """Create the DeviceClass, start watching, and return once every slice is published."""
        try:
            await self.http.create(DEVICE_CLASSES_PATH, device_class())
        except ApiError as exc:
            if exc.status != 409:
                raise
        self._queue.start()
        self._watch_task = asyncio.create_task(self._informer.run(), name="dra-driver-watch")
        await self._informer.synced.wait()
        self._queue.add_all(self._wanted)
        await self._all_published.wait()

    async def stop(self) -> None:
        for task in list(self._attaching.values()):
            task.cancel()
        if self._watch_task is not None:
            self._watch_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watch_task
        await self._queue.stop()

    def _on_slice_event(self, event_type: str, obj: JsonObject) -> None:
        name = obj.get("metadata", {}).get("name", "")
        if name not in self._wanted:
            return
        if event_type == "DELETED":
            self._missing.add(name)
            self._queue.add(name)
        else:
            self._missing.discard(name)
            if not self._missing:
                self._all_published.set()

    def _on_claim_event(self, event_type: str, claim: JsonObject) -> None:
        if event_type == "DELETED":
            return
        status = claim.get("status") or {}
        allocation = status.get("allocation") or {}
        reported = {(d.get("pool"), d.get("device")) for d in status.get("devices") or []}
        waiting = [
            result
            for result in (allocation.get("devices") or {}).get("results") or []
            if result.get("driver") == DRIVER_NAME
            and result.get("bindingConditions")
            and (result.get("pool"), result.get("device")) not in reported
        ]
        meta = claim.get("metadata") or {}
        key = f"{meta.get('namespace')}/{meta.get('name')}"
        if waiting and key not in self._attaching:
            task = asyncio.get_running_loop().create_task(self._attach(key, waiting))
            self._attaching[key] = task
            task.add_done_callback(lambda _: self._attaching.pop(key, None))

    def _attach_fails(self, pool: str, device_name: str) -> bool:
        for published in self._informer.cache.values():
            spec = published.get("spec") or {}
            if (spec.get("pool") or {}).get("name") != pool:
                continue
            for device in spec.get("devices") or []:
                if device.get("name") == device_name:
                    return bool(
                        ((device.get("attributes") or {}).get(ATTACH_FAILS_ATTRIBUTE) or {}).get("bool")
                    )
        return False

    async def _attach(self, key: str, results: list[JsonObject]) -> None:
        """Report the binding conditions of the claim's devices, as the driver's controller would."""
        await asyncio.sleep(self.attach_seconds)
        namespace, name = key.split("/", 1)
        devices = []
        for result in results:
            if self._attach_fails(result["pool"], result["device"]):
                types, reason = (result.get("bindingFailureConditions") or [])[:1], "AttachFailed"
            else:
                types, reason = result["bindingConditions"], "Attached"
            entry: JsonObject = {
                "driver": DRIVER_NAME,
                "pool": result["pool"],
                "device": result["device"],
                "conditions": [
                    {
                        "type": t,
                        "status": "True",
                        "reason": reason,
                        "message": "",
                        "lastTransitionTime": now_rfc3339(),
                    }
                    for t in types
                ],
            }
            if result.get("shareID"):
                entry["shareID"] = result["shareID"]
            devices.append(entry)
        try:
            await self.http.patch(
                CLAIMS_PATH.format(namespace=namespace, name=name), {"status": {"devices": devices}}
            )
        except ApiError as exc:
            if exc.status not in (404, 409, 422):
                raise
            log.debug("could not report binding conditions", claim=key, status=exc.status)
        else:
            log.debug("reported binding conditions", claim=key, devices=len(devices))

    async def _sync_slice(self, name: str) -> None:
        if name in self._informer.cache:
            return
        try:
            await self.http.create(
                SLICES_PATH, resource_slice(self._wanted[name], self.devices_per_node, self.list_attributes)
            )
        except ApiError as exc:
            if exc.status != 409:
                raise
        log.debug("published resource slice", slice=name)
