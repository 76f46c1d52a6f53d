"""CapacityReservation (filter): keeps pods off the capacity held for a gang (scheduler/reservation.py),
except valid backfills, and says so in the pod's diagnosis: "node X: capacity held for gang ns/big"."""

from __future__ import annotations

from typing import ClassVar

from lockstep.scheduler.framework import SKIP, SUCCESS, CycleState, NodeInfo, PodInfo, Status
from lockstep.scheduler.reservation import PLUGIN, ReservationBook

RESERVATION_SERVICE = "reservations"
_BACKFILL = f"{PLUGIN}/backfill"  # node name -> the reservation a placement there backfills
_HELD = f"{PLUGIN}/held"  # the rejection messages, one per node
SHOWN_NODES = 3


class CapacityReservation:
    name: ClassVar[str] = PLUGIN

    def __init__(self, book: ReservationBook) -> None:
        self.book = book

    def pre_filter(self, state: CycleState, pod: PodInfo) -> Status:
        return SUCCESS if self.book.holding else SKIP

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        status, backfills = self.book.check(pod, node)
        if backfills is not None:
            placed: dict[str, object] = state.read(_BACKFILL) or {}
            if not placed:
                state.write(_BACKFILL, placed)
            placed[node.name] = backfills
        elif not status.ok:
            held: dict[str, None] = state.read(_HELD) or {}
            if not held:
                state.write(_HELD, held)
            held[status.message] = None  # Filter may run twice on a node (find, then diagnose)
        return status

    def rejection_summary(self, state: CycleState, pod: PodInfo) -> str | None:
        held = list(state.read(_HELD) or {})
        if not held:
            return None
        shown = "; ".join(held[:SHOWN_NODES])
        return shown + (f"; and {len(held) - SHOWN_NODES} more nodes" if len(held) > SHOWN_NODES else "")

    def reserve(self, state: CycleState, pod: PodInfo, node_name: str) -> Status:
        backfills = (state.read(_BACKFILL) or {}).get(node_name)
        if backfills is not None:
            self.book.backfill_reserved(pod.uid, backfills)
        return SUCCESS

    def unreserve(self, state: CycleState, pod: PodInfo, node_name: str) -> None:
        self.book.backfill_unreserved(pod.uid)
