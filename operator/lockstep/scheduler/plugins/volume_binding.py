"""VolumeBinding: places pods with their PersistentVolumeClaims, as kube-scheduler's volumebinding.

PreFilter reads the pod's claims, those its volumes name and those of its generic ephemeral volumes
(``<pod>-<volume>``, created by kube-controller-manager's ephemeral volume controller): a missing
claim (``persistentvolumeclaim "x" not found``; for an ephemeral volume ``waiting for ephemeral volume
controller to create the persistentvolumeclaim "x"``), one being deleted, an ephemeral volume's claim
the pod does not control (``PVC ns/x was not created for pod ns/p (pod is not owner)``), a bound one
whose volume is gone, or an unbound one that is not of a ``WaitForFirstConsumer`` class keeps the pod
pending, unresolvable, with the reason. A bound claim's
volume limits the nodes by its node affinity. An unbound ``WaitForFirstConsumer`` claim is matched on
each node with the smallest available volume of its class that is big enough, has its access modes
and volume mode, matches its selector and whose node affinity admits the node (a volume pre-bound to
the claim through ``spec.claimRef`` first); when none is left and the class has a provisioner, the
node is chosen for dynamic provisioning (it must be the claim's selected node if it has one, and in
the class's allowedTopologies).

Gang-aware: Reserve records the choice, so a volume chosen for one member is not offered to the
next member of the same group cycle (nor to another cycle), and a claim the members share is decided
once. PreBind, which runs after Permit (for a gang: once the whole gang is placed), writes the
volume's ``spec.claimRef`` or the claim's selected-node annotation, then waits for the PV controller
(or the provisioner) to complete the binding, at most ``bind_timeout`` seconds. Unreserve forgets the
choice and undoes the writes whose binding has not completed (the claimRef or annotation is taken
away again); a completed binding stays, as upstream's.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import weakref
from collections import Counter
from collections.abc import Collection, Coroutine
from dataclasses import dataclass, field
from typing import Any, ClassVar

from lockstep.api.resource import NodeSelector
from lockstep.api.volume import (
    NO_PROVISIONER,
    PersistentVolume,
    PersistentVolumeClaim,
    StorageClass,
    label_selector_matches,
)
from lockstep.dra.node_selector import node_selector_matches
from lockstep.scheduler.framework import SKIP, SUCCESS, CycleState, NodeInfo, PodInfo, Status
from lockstep.scheduler.plugin_context import PluginContext
from lockstep.scheduler.ports import VolumeAPI
from lockstep.state.assume_cache import AssumeCacheError
from lockstep.state.cluster import ClusterCache
from lockstep.state.volumes import VolumeStore

log = logging.getLogger(__name__)

STORE_SERVICE = "volumes.store"
VOLUME_API_SERVICE = "volumes.api"
BIND_TIMEOUT_SECONDS = 600.0  # kube-scheduler's bindTimeoutSeconds
BIND_COMPLETED = "pv.kubernetes.io/bind-completed"
HOSTNAME_LABEL = "kubernetes.io/hostname"
_STATE_KEY = "VolumeBinding"

# kube-scheduler's reasons (volumebinding.ErrReason*)
NODE_CONFLICT = "node(s) had volume node affinity conflict"
BIND_CONFLICT = "node(s) didn't find available persistent volumes to bind"
UNBOUND_IMMEDIATE = "pod has unbound immediate PersistentVolumeClaims"
PV_NOT_EXIST = "node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)"


@dataclass(slots=True)
class _Decision:
    """How one unbound claim gets its volume: a chosen PV, or provisioning on a node."""

    claim: PersistentVolumeClaim
    volume: str = ""
    provision_on: str = ""


@dataclass(slots=True)
class _InFlight:
    decision: _Decision
    users: set[str] = field(default_factory=set)  # pod uids reserved with this decision


@dataclass(slots=True)
class _PodVolumes:
    """The pod's claims as PreFilter sorted them; carried to Filter, Reserve, PreBind, Unreserve."""

    claims: list[PersistentVolumeClaim]
    bound: list[PersistentVolume] = field(default_factory=list)
    missing_volumes: bool = False  # a bound claim's volume is not (yet) known: no node fits
    shared: list[_Decision] = field(default_factory=list)  # decided for another pod, still in flight
    to_bind: list[tuple[PersistentVolumeClaim, StorageClass]] = field(default_factory=list)
    found: dict[str, list[_Decision]] = field(default_factory=dict)  # node -> decisions (Filter)
    reserved: list[str] = field(default_factory=list)  # claim keys this pod joined at Reserve
    written: list[_Decision] = field(default_factory=list)  # writes of this pod's PreBind
    rejections: dict[str, str] = field(default_factory=dict)


def fully_bound(claim: PersistentVolumeClaim) -> bool:
    """As kube-scheduler: a volume name and the PV controller's bind-completed annotation."""
    return bool(claim.volume_name) and BIND_COMPLETED in claim.metadata.annotations


def claim_is_for_pod(claim: PersistentVolumeClaim, pod: PodInfo) -> bool:
    """An ephemeral volume's claim is used only when the pod controls it (``ephemeral.VolumeIsForPod``):
    a PVC of that name made by someone else is never taken for the pod's scratch space."""
    return claim.metadata.namespace == pod.namespace and claim.metadata.controller_uid == pod.uid


def volume_fits(volume: PersistentVolume, claim: PersistentVolumeClaim) -> bool:
    """Capacity, access modes, volume mode, selector, and free or pre-bound to this claim."""
    ref = volume.claim_ref
    if ref is not None and (ref.key != claim.key or (ref.uid and ref.uid != claim.metadata.uid)):
        return False
    if volume.metadata.deleting or volume.phase in ("Released", "Failed"):
        return False
    if volume.capacity < claim.request or not claim.access_modes <= volume.access_modes:
        return False
    if volume.volume_mode != claim.volume_mode:
        return False
    return claim.selector is None or label_selector_matches(claim.selector, volume.metadata.labels)


def topology_allows(storage_class: StorageClass, node: NodeInfo) -> bool:
    if not storage_class.allowed_topologies:
        return True
    return any(
        all(node.labels.get(key) in values for key, values in term)
        for term in storage_class.allowed_topologies
    )


def volume_store(ctx: PluginContext) -> VolumeStore:
    """The store the operator hands over in ``ctx.services``, shared by the volume plugins; without
    one (a scheduler without volume wiring) an empty store, in which every claim is missing."""
    store = ctx.services.get(STORE_SERVICE)
    return store if isinstance(store, VolumeStore) else VolumeStore()


class VolumeBinding:
    name: ClassVar[str] = "VolumeBinding"

    def __init__(
        self,
        store: VolumeStore,
        api: VolumeAPI | None,
        bind_timeout: float = BIND_TIMEOUT_SECONDS,
        cache: ClusterCache | None = None,
    ) -> None:
        self.store = store
        self.api = api
        self.cache = cache  # the node label index, to narrow the nodes of pods with pinned volumes
        self.bind_timeout = bind_timeout
        self._in_flight: dict[str, _InFlight] = {}  # claim key -> the decision reserved for it
        self._taken: dict[str, str] = {}  # volume name -> claim key it is reserved for
        self._locks: weakref.WeakValueDictionary[str, asyncio.Lock] = weakref.WeakValueDictionary()
        self._tasks: set[asyncio.Task[None]] = set()

    @classmethod
    def from_context(cls, ctx: PluginContext) -> VolumeBinding:
        """Uses the store and API the operator hands over in ``ctx.services``; without them (a
        scheduler without volume wiring) an empty store, and PreBind refuses to write."""
        api = ctx.services.get(VOLUME_API_SERVICE)
        return cls(volume_store(ctx), api if isinstance(api, VolumeAPI) else None, cache=ctx.cache)

    def _pod_volumes(self, state: CycleState, pod: PodInfo) -> _PodVolumes | None:
        value = state.read(f"{_STATE_KEY}/{pod.uid}")
        return value if isinstance(value, _PodVolumes) else None

    # --- PreFilter / Filter -------------------------------------------------------------------------

    def pre_filter(self, state: CycleState, pod: PodInfo) -> Status:
        names = pod.pvc_names
        if not names:
            return SKIP
        volumes = _PodVolumes([])
        for name in names:
            key = f"{pod.namespace}/{name}"
            ephemeral = name in pod.ephemeral_claims
            claim = self.store.claims.get(key)
            if claim is None:
                if ephemeral:  # normal right after the pod was created
                    return Status.unresolvable(
                        self.name,
                        "PVCNotFound",
                        "waiting for ephemeral volume controller to create the persistentvolumeclaim "
                        f'"{name}"',
                    )
                return Status.unresolvable(
                    self.name, "PVCNotFound", f'persistentvolumeclaim "{name}" not found'
                )
            if claim.metadata.deleting:
                return Status.unresolvable(
                    self.name, "PVCDeleting", f'persistentvolumeclaim "{name}" is being deleted'
                )
            if ephemeral and not claim_is_for_pod(claim, pod):
                return Status.unresolvable(
                    self.name,
                    "PVCNotOwned",
                    f"PVC {claim.key} was not created for pod {pod.key} (pod is not owner)",
                )
            volumes.claims.append(claim)
            if fully_bound(claim):
                volume = self.store.volumes.get(claim.volume_name)
                if volume is not None:
                    volumes.bound.append(volume)
                elif claim.phase == "Lost":
                    return Status.unresolvable(
                        self.name,
                        "PVNotFound",
                        f'persistentvolumeclaim "{name}" bound to non-existent persistentvolume '
                        f'"{claim.volume_name}"',
                    )
                else:  # the volume may just not have reached the informer yet
                    volumes.missing_volumes = True
                continue
            flight = self._in_flight.get(key)
            if flight is not None:
                volumes.shared.append(flight.decision)
                continue
            storage_class = self.store.classes.get(claim.storage_class or "")
            if claim.storage_class and storage_class is None:
                return Status.unresolvable(
                    self.name,
                    "StorageClassNotFound",
                    f'storageclass.storage.k8s.io "{claim.storage_class}" not found',
                )
            if claim.volume_name or storage_class is None or not storage_class.wait_for_first_consumer:
                return Status.unresolvable(self.name, "UnboundImmediatePVC", UNBOUND_IMMEDIATE)
            volumes.to_bind.append((claim, storage_class))
        volumes.to_bind.sort(key=lambda pair: pair[0].request)  # the smallest claims choose first
        state.write(f"{_STATE_KEY}/{pod.uid}", volumes)
        return SUCCESS

    def candidate_nodes(self, state: CycleState, pod: PodInfo) -> Collection[str] | None:
        """The nodes a bound (or already chosen) volume is pinned to by a ``kubernetes.io/hostname``
        (or ``metadata.name``) ``In`` requirement, e.g. a local volume; None when none is pinned.
        Filter still checks the whole node affinity."""
        volumes = self._pod_volumes(state, pod)
        if volumes is None or self.cache is None:
            return None
        narrowed: set[str] | None = None
        pinned = [v.node_affinity for v in volumes.bound]
        for decision in volumes.shared:
            if decision.provision_on:
                pinned_to = {decision.provision_on}
                narrowed = pinned_to if narrowed is None else narrowed & pinned_to
            elif (volume := self.store.volumes.get(decision.volume)) is not None:
                pinned.append(volume.node_affinity)
        for selector in pinned:
            names = self._pinned_nodes(selector)
            if names is not None:
                narrowed = names if narrowed is None else narrowed & names
        return narrowed

    def _pinned_nodes(self, selector: NodeSelector | None) -> set[str] | None:
        """Every term names its nodes by hostname or name: the union of those nodes, else None."""
        assert self.cache is not None
        if selector is None or not selector.node_selector_terms:
            return None
        names: set[str] = set()
        for term in selector.node_selector_terms:
            term_names: set[str] | None = None
            pinning = [(r, HOSTNAME_LABEL) for r in term.match_expressions]
            pinning += [(r, "metadata.name") for r in term.match_fields]
            for requirement, key in pinning:
                if requirement.operator != "In" or requirement.key != key:
                    continue
                if key == HOSTNAME_LABEL:
                    found = {n for v in requirement.values for n in self.cache.nodes_with_label(key, v)}
                else:
                    found = set(requirement.values)
                term_names = found if term_names is None else term_names & found
            if term_names is None:
                return None
            names |= term_names
        return names

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        """As upstream, every reason the node fails for: missing volumes, a bound (or already
        chosen) volume's node affinity, no volume or provisioning for an unbound claim."""
        volumes = self._pod_volumes(state, pod)
        if volumes is None:
            return SUCCESS
        if volumes.missing_volumes:
            return self._reject(volumes, node, "PVNotFound", (PV_NOT_EXIST,))
        reasons: list[str] = []
        conflict = any(
            volume.node_affinity is not None
            and not node_selector_matches(volume.node_affinity, node.name, node.labels)
            for volume in volumes.bound
        ) or any(not self._decision_allows(decision, node) for decision in volumes.shared)
        if conflict:
            reasons.append(NODE_CONFLICT)
        if volumes.to_bind:
            decisions = self._decide(volumes, node)
            if decisions is None:
                reasons.append(BIND_CONFLICT)
            elif not reasons:
                volumes.found[node.name] = decisions
        if not reasons:
            return SUCCESS
        cause = "VolumeNodeAffinityConflict" if conflict else "VolumeBindConflict"
        return self._reject(volumes, node, cause, tuple(reasons))

    def _reject(self, volumes: _PodVolumes, node: NodeInfo, cause: str, reasons: tuple[str, ...]) -> Status:
        volumes.rejections[node.name] = "; ".join(reasons)
        return Status.unresolvable(self.name, cause, *reasons, summary=reasons[0])

    def _decision_allows(self, decision: _Decision, node: NodeInfo) -> bool:
        if decision.provision_on:
            return decision.provision_on == node.name
        volume = self.store.volumes.get(decision.volume)
        return (
            volume is None
            or volume.node_affinity is None
            or node_selector_matches(volume.node_affinity, node.name, node.labels)
        )

    def _decide(self, volumes: _PodVolumes, node: NodeInfo) -> list[_Decision] | None:
        """A volume (or provisioning) per unbound claim on ``node``, or None if one has neither."""
        chosen: set[str] = set()
        decisions = []
        for claim, storage_class in volumes.to_bind:
            best: PersistentVolume | None = None
            for volume in self.store.volumes_of_class(storage_class.name):
                if volume.name in chosen or self._taken.get(volume.name, claim.key) != claim.key:
                    continue
                if not volume_fits(volume, claim):
                    continue
                if volume.node_affinity is not None and not node_selector_matches(
                    volume.node_affinity, node.name, node.labels
                ):
                    continue
                pre_bound = volume.claim_ref is not None
                if pre_bound or best is None or volume.capacity < best.capacity:
                    best = volume
                    if pre_bound:
                        break
            if best is not None:
                chosen.add(best.name)
                decisions.append(_Decision(claim, volume=best.name))
            elif (
                storage_class.provisioner != NO_PROVISIONER
                and claim.selected_node in ("", node.name)
                and topology_allows(storage_class, node)
            ):
                decisions.append(_Decision(claim, provision_on=node.name))
            else:
                return None
        return decisions

    def rejection_summary(self, state: CycleState, pod: PodInfo) -> str | None:
        volumes = self._pod_volumes(state, pod)
        if volumes is None or not volumes.rejections:
            return None
        counts = Counter(volumes.rejections.values())
        return "; ".join(reason for reason, _ in counts.most_common())

    # --- Reserve / Unreserve ------------------------------------------------------------------------

    def reserve(self, state: CycleState, pod: PodInfo, node_name: str) -> Status:
        volumes = self._pod_volumes(state, pod)
        if volumes is None:
            return SUCCESS
        decisions = volumes.found.get(node_name, []) if volumes.to_bind else []
        if len(decisions) != len(volumes.to_bind) or any(
            self._taken.get(d.volume, d.claim.key) != d.claim.key for d in decisions if d.volume
        ):
            return Status.unresolvable(self.name, "VolumeBindConflict", BIND_CONFLICT, summary=BIND_CONFLICT)
        for decision in [*decisions, *volumes.shared]:
            key = decision.claim.key
            flight = self._in_flight.get(key)
            if flight is None:
                flight = self._in_flight[key] = _InFlight(decision)
                if decision.volume:
                    self._taken[decision.volume] = key
            flight.users.add(pod.uid)
            volumes.reserved.append(key)
        return SUCCESS

    def _leave(self, key: str, pod_uid: str) -> _Decision | None:
        """Take the pod out of the claim's in-flight decision; the decision when it was the last user."""
        flight = self._in_flight.get(key)
        if flight is None:
            return None
        flight.users.discard(pod_uid)
        if flight.users:
            return None
        del self._in_flight[key]
        if flight.decision.volume and self._taken.get(flight.decision.volume) == key:
            del self._taken[flight.decision.volume]
        return flight.decision

    def unreserve(self, state: CycleState, pod: PodInfo, node_name: str) -> None:
        volumes = self._pod_volumes(state, pod)
        if volumes is None:
            return
        for key in volumes.reserved:
            self._leave(key, pod.uid)
        volumes.reserved.clear()
        for decision in volumes.written:
            self._in_background(self._undo(decision))
        volumes.written.clear()

    async def _undo(self, decision: _Decision) -> None:
        """Take back a pre-binding whose binding has not completed (the claim has no volume yet)."""
        if self.api is None:
            return
        async with self._lock(decision.claim.key):
            claim = self.store.claims.get(decision.claim.key)
            if claim is None or claim.volume_name or decision.claim.key in self._in_flight:
                return  # completed (kept, as upstream), gone, or chosen again meanwhile
            if decision.volume:
                volume = self.store.volumes.get(decision.volume)
                if volume is not None and volume.claim_ref is not None and volume.claim_ref.key == claim.key:
                    outcome = await self.api.set_claim_ref(volume, None)
                    self._assume(outcome.written)
            elif claim.selected_node:
                outcome = await self.api.set_selected_node(claim, None)
                self._assume(outcome.written)

    def _in_background(self, work: Coroutine[Any, Any, None]) -> None:
        try:
            task = asyncio.get_running_loop().create_task(work)
        except RuntimeError:  # no event loop: nothing was written by this process
            work.close()
            return
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def wait_for_background(self) -> None:
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    # --- PreBind ------------------------------------------------------------------------------------

    def _lock(self, key: str) -> asyncio.Lock:
        lock = self._locks.get(key)
        if lock is None:
            lock = self._locks[key] = asyncio.Lock()
        return lock

    def _assume(self, written: PersistentVolume | PersistentVolumeClaim | None) -> None:
        with contextlib.suppress(AssumeCacheError):
            if isinstance(written, PersistentVolume):
                self.store.volumes.assume(written)
            elif isinstance(written, PersistentVolumeClaim):
                self.store.claims.assume(written)

    def pre_bind_writes(self, state: CycleState, pod: PodInfo, node_name: str) -> bool:
        volumes = self._pod_volumes(state, pod)
        return volumes is not None and any(key in self._in_flight for key in volumes.reserved)

    async def pre_bind(self, state: CycleState, pod: PodInfo, node_name: str) -> Status:
        volumes = self._pod_volumes(state, pod)
        if volumes is None:
            return SUCCESS
        for key in volumes.reserved:
            flight = self._in_flight.get(key)
            if flight is None:
                continue
            async with self._lock(key):
                status = await self._write(flight.decision, node_name, volumes)
            if not status.ok:
                return status
        status = await self._wait_until_bound(volumes, pod)
        if status.ok:
            for key in volumes.reserved:
                self._leave(key, pod.uid)
            volumes.reserved.clear()
            volumes.written.clear()
        return status

    async def _write(self, decision: _Decision, node_name: str, volumes: _PodVolumes) -> Status:
        claim = self.store.claims.get(decision.claim.key)
        if claim is None or claim.metadata.uid != decision.claim.metadata.uid:
            return Status.unschedulable(
                self.name,
                "PVCNotFound",
                f'persistentvolumeclaim "{decision.claim.metadata.name}" was deleted',
            )
        if fully_bound(claim):
            return SUCCESS
        if self.api is None:
            return Status.error(self.name, "no volume API is configured to pre-bind volumes")
        if decision.volume:
            volume = self.store.volumes.get(decision.volume)
            if volume is None:
                return Status.unschedulable(
                    self.name, "VolumeBindConflict", f'persistentvolume "{decision.volume}" was deleted'
                )
            if volume.claim_ref is not None and volume.claim_ref.key == claim.key:
                return SUCCESS  # pre-bound already (by the user, or a member sharing the claim)
            if volume.claim_ref is not None:
                return Status.unschedulable(
                    self.name,
                    "VolumeBindConflict",
                    f'persistentvolume "{volume.name}" was bound to another claim',
                )
            outcome = await self.api.set_claim_ref(volume, claim)
            what = f'pre-binding persistentvolume "{volume.name}"'
        else:
            if claim.selected_node == decision.provision_on:
                return SUCCESS
            outcome = await self.api.set_selected_node(claim, decision.provision_on)
            what = f'selecting node {decision.provision_on} for persistentvolumeclaim "{claim.metadata.name}"'
        if not outcome.ok:
            return Status.unschedulable(
                self.name,
                "VolumeBindConflict",
                f"{what} failed: {outcome.result.value} {outcome.message}".strip(),
            )
        self._assume(outcome.written)
        volumes.written.append(decision)
        return SUCCESS

    async def _wait_until_bound(self, volumes: _PodVolumes, pod: PodInfo) -> Status:
        """Wait for the PV controller (or the provisioner) to bind every claim of the pod."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.bind_timeout
        while True:
            pending = [c.metadata.name for c in volumes.claims if not self._is_bound(c.key)]
            if not pending:
                return SUCCESS
            remaining = deadline - loop.time()
            if remaining <= 0:
                return Status.unschedulable(
                    self.name,
                    "VolumeBindingTimeout",
                    f"binding volumes: timed out after {self.bind_timeout:g}s waiting for "
                    f"persistentvolumeclaim(s) {', '.join(pending)} of pod {pod.key} to be bound",
                )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.store.changed().wait(), remaining)

    def _is_bound(self, key: str) -> bool:
        claim = self.store.claims.get(key)
        if claim is None or not fully_bound(claim):
            return False
        volume = self.store.volumes.get(claim.volume_name)
        return (
            volume is not None and volume.claim_ref is not None and volume.claim_ref.uid == claim.metadata.uid
        )
