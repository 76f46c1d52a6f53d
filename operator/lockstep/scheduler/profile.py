"""Plugin registry and the Profile (which plugins run at which extension point).

A plugin is registered once in ``REGISTRY`` under its name with a factory that builds it from a
``PluginContext``; ``DEFAULT_PLUGINS`` lists the names a profile runs, in order. The profile then
sorts each plugin into the extension points whose protocol it implements.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from lockstep.config import DEFAULT_SCORE_WEIGHTS, ScoreStrategy
from lockstep.scheduler.framework import (
    BatchScorePlugin,
    CandidateNodesPlugin,
    ChoicesPlugin,
    FilterPlugin,
    NormalizeScorePlugin,
    PermitPlugin,
    Plugin,
    PreBindPlugin,
    PreferredNodesPlugin,
    PreFilterPlugin,
    PreScorePlugin,
    ReservePlugin,
    ScorePlugin,
)
from lockstep.scheduler.plugin_context import PluginContext, PluginFactory
from lockstep.scheduler.plugins.capacity_reservation import RESERVATION_SERVICE, CapacityReservation
from lockstep.scheduler.plugins.dynamic_resources import DynamicResources, dra_extended_resources
from lockstep.scheduler.plugins.gang import GangPermit, GangTopology
from lockstep.scheduler.plugins.image_locality import ImageLocality
from lockstep.scheduler.plugins.inter_pod_affinity import InterPodAffinity
from lockstep.scheduler.plugins.node_affinity import NodeAffinity
from lockstep.scheduler.plugins.node_basics import NodeName, NodeUnschedulable, TaintToleration
from lockstep.scheduler.plugins.node_ports import NodePorts
from lockstep.scheduler.plugins.node_resources import (
    NodeResourcesBalancedAllocation,
    NodeResourcesFit,
    NodeResourcesScore,
)
from lockstep.scheduler.plugins.node_volume_limits import NodeVolumeLimits
from lockstep.scheduler.plugins.pod_topology_spread import PodTopologySpread
from lockstep.scheduler.plugins.podgroup_protection import PodGroupProtection
from lockstep.scheduler.plugins.unsupported import UnsupportedPodSpec
from lockstep.scheduler.plugins.volume_binding import VolumeBinding, volume_store
from lockstep.scheduler.plugins.volume_restrictions import VolumeRestrictions
from lockstep.scheduler.plugins.volume_zone import VolumeZone
from lockstep.scheduler.reservation import ReservationBook


def _reservation_book(ctx: PluginContext) -> ReservationBook:
    """The scheduler's reservations; a profile built without a scheduler holds nothing."""
    book = ctx.services.get(RESERVATION_SERVICE)
    return book if isinstance(book, ReservationBook) else ReservationBook(enabled=False, clock=time.time)


REGISTRY: dict[str, PluginFactory] = {
    PodGroupProtection.name: PodGroupProtection.from_context,
    UnsupportedPodSpec.name: lambda ctx: UnsupportedPodSpec(),
    NodeUnschedulable.name: lambda ctx: NodeUnschedulable(),
    NodeName.name: lambda ctx: NodeName(),
    TaintToleration.name: lambda ctx: TaintToleration(),
    NodeAffinity.name: lambda ctx: NodeAffinity(ctx.cache),
    NodeResourcesFit.name: lambda ctx: NodeResourcesFit(dra_extended_resources(ctx)),
    CapacityReservation.name: lambda ctx: CapacityReservation(_reservation_book(ctx)),
    NodeResourcesScore.name: lambda ctx: NodeResourcesScore(ctx.settings.score_strategy),
    NodeResourcesBalancedAllocation.name: lambda ctx: NodeResourcesBalancedAllocation(),
    ImageLocality.name: lambda ctx: ImageLocality(ctx.cache),
    NodePorts.name: lambda ctx: NodePorts(ctx.cache),
    InterPodAffinity.name: lambda ctx: InterPodAffinity(ctx.cache),
    PodTopologySpread.name: PodTopologySpread.from_context,
    GangTopology.name: lambda ctx: GangTopology(
        ctx.cache, ctx.settings.topology_key, ctx.settings.score_strategy is ScoreStrategy.LEAST_ALLOCATED
    ),
    GangPermit.name: lambda ctx: GangPermit(ctx.cache, ctx.waiting),
    DynamicResources.name: DynamicResources.from_context,
    VolumeRestrictions.name: lambda ctx: VolumeRestrictions(ctx.cache, volume_store(ctx)),
    VolumeZone.name: lambda ctx: VolumeZone(volume_store(ctx)),
    VolumeBinding.name: VolumeBinding.from_context,
    NodeVolumeLimits.name: lambda ctx: NodeVolumeLimits(ctx.cache, volume_store(ctx)),
}

# Cheap, selective filters first: a node is rejected by the first filter that fails.
DEFAULT_PLUGINS: tuple[str, ...] = (
    PodGroupProtection.name,  # PreBind only, and the first: nothing is written for a group it refuses
    UnsupportedPodSpec.name,
    NodeUnschedulable.name,
    NodeName.name,
    TaintToleration.name,
    NodeAffinity.name,
    NodePorts.name,
    VolumeRestrictions.name,  # PreFilter only; pods without ReadWriteOncePod claims skip it
    VolumeZone.name,
    NodeResourcesFit.name,
    CapacityReservation.name,  # PreFilter skips it while no reservation holds capacity
    VolumeBinding.name,
    NodeVolumeLimits.name,
    InterPodAffinity.name,
    PodTopologySpread.name,
    DynamicResources.name,  # after the node filters: it is the most expensive one
    NodeResourcesScore.name,
    NodeResourcesBalancedAllocation.name,
    ImageLocality.name,
    GangTopology.name,
    GangPermit.name,
)

# Score weights (the ``score_weights`` setting overrides them); a plugin not listed weighs 1.
SCORE_WEIGHTS: Mapping[str, int] = DEFAULT_SCORE_WEIGHTS


@dataclass(frozen=True, slots=True)
class Profile:
    plugins: tuple[Plugin, ...]
    pre_filter: tuple[PreFilterPlugin, ...]
    filter: tuple[FilterPlugin, ...]
    candidate_nodes: tuple[CandidateNodesPlugin, ...]
    preferred_nodes: tuple[PreferredNodesPlugin, ...]
    score: tuple[tuple[ScorePlugin, int], ...]
    pre_score: tuple[PreScorePlugin, ...]
    normalize_score: Mapping[str, NormalizeScorePlugin]
    batch_score: Mapping[str, BatchScorePlugin]
    reserve: tuple[ReservePlugin, ...]
    permit: tuple[PermitPlugin, ...]
    pre_bind: tuple[PreBindPlugin, ...]
    choices: tuple[ChoicesPlugin, ...] = ()

    @classmethod
    def from_plugins(cls, plugins: Sequence[Plugin], weights: Mapping[str, int] | None = None) -> Profile:
        names = [p.name for p in plugins]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"scheduler profile: plugin(s) listed twice: {', '.join(duplicates)}")
        weights = SCORE_WEIGHTS if weights is None else weights
        return cls(
            plugins=tuple(plugins),
            pre_filter=tuple(p for p in plugins if isinstance(p, PreFilterPlugin)),
            filter=tuple(p for p in plugins if isinstance(p, FilterPlugin)),
            candidate_nodes=tuple(p for p in plugins if isinstance(p, CandidateNodesPlugin)),
            preferred_nodes=tuple(p for p in plugins if isinstance(p, PreferredNodesPlugin)),
            score=tuple(
                (p, weights.get(p.name, 1))
                for p in plugins
                if isinstance(p, ScorePlugin) and weights.get(p.name, 1) > 0
            ),
            pre_score=tuple(
                p
                for p in plugins
                if isinstance(p, PreScorePlugin) and isinstance(p, ScorePlugin) and weights.get(p.name, 1) > 0
            ),
            normalize_score={p.name: p for p in plugins if isinstance(p, NormalizeScorePlugin)},
            batch_score={p.name: p for p in plugins if isinstance(p, BatchScorePlugin)},
            reserve=tuple(p for p in plugins if isinstance(p, ReservePlugin)),
            permit=tuple(p for p in plugins if isinstance(p, PermitPlugin)),
            pre_bind=tuple(p for p in plugins if isinstance(p, PreBindPlugin)),
            choices=tuple(p for p in plugins if isinstance(p, ChoicesPlugin)),
        )

    def get(self, name: str) -> Plugin | None:
        return next((p for p in self.plugins if p.name == name), None)


def build_profile(
    ctx: PluginContext,
    names: Sequence[str] = DEFAULT_PLUGINS,
    extra: Sequence[Plugin] = (),
    registry: Mapping[str, PluginFactory] = REGISTRY,
) -> Profile:
    """Instantiate the named plugins (then ``extra`` ones, already built) into a Profile."""
    unknown = [n for n in names if n not in registry]
    if unknown:
        known = ", ".join(sorted(registry))
        raise ValueError(f"scheduler profile: unknown plugin(s) {', '.join(unknown)} (known: {known})")
    return Profile.from_plugins([registry[n](ctx) for n in names] + list(extra), ctx.settings.score_weights)
