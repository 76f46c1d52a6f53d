"""Leader election on a coordination.k8s.io/v1 Lease, the algorithm of client-go's leaderelection.

A candidate takes the lease when it does not exist, is released (empty holder), or has not changed
for ``lease_duration`` seconds as observed by this process's own clock (so clock skew between
replicas does not matter). The leader renews every ``retry_period`` and steps down when it could
not renew for ``renew_deadline``. Every write is a conditional PUT (resourceVersion), so two
candidates can never both win the same round.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable
from typing import Any

import aiohttp

from lockstep.kube.client import LEASES, ApiError, KubeClient
from lockstep.kube.patching import now_micro
from lockstep.logging import get_logger

log = get_logger("lockstep.kube.lease")


class LeaseNamespaceMissingError(RuntimeError):
    """The Lease cannot be created because its namespace does not exist: a configuration error that
    waiting does not cure, so the operator stops instead of retrying."""

    def __init__(self, namespace: str, name: str) -> None:
        super().__init__(
            f"cannot create the leader-election Lease {namespace}/{name}: namespace {namespace!r} does not "
            f"exist. Create it (kubectl create namespace {namespace}) or point --lease-namespace "
            "(LOCKSTEP_LEASE_NAMESPACE) at an existing namespace"
        )
        self.namespace = namespace


class LeaderElector:
    def __init__(
        self,
        client: KubeClient,
        *,
        namespace: str,
        name: str,
        identity: str,
        lease_duration: float,
        renew_deadline: float,
        retry_period: float,
        on_started_leading: Callable[[], None],
        on_stopped_leading: Callable[[], None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if renew_deadline >= lease_duration:
            raise ValueError(
                f"renew deadline ({renew_deadline}s) must be shorter than "
                f"the lease duration ({lease_duration}s)"
            )
        self.client = client
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.lease_duration = lease_duration
        self.renew_deadline = renew_deadline
        self.retry_period = retry_period
        self.on_started_leading = on_started_leading
        self.on_stopped_leading = on_stopped_leading
        self.clock = clock
        self.is_leader = False
        self._observed_spec: dict[str, Any] | None = None
        self._observed_at = 0.0
        self._resource_version = ""

    async def run(self) -> None:
        while True:
            while not await self._try_acquire_or_renew():  # noqa: ASYNC110 - polling the API, not a flag
                await asyncio.sleep(self.retry_period)
            self.is_leader = True
            log.info("became leader", lease=f"{self.namespace}/{self.name}", identity=self.identity)
            self.on_started_leading()
            last_renewal = self.clock()
            while True:
                await asyncio.sleep(self.retry_period)
                if await self._try_acquire_or_renew():
                    last_renewal = self.clock()
                elif self.clock() - last_renewal >= self.renew_deadline or not self._held_by_me():
                    break
            self.is_leader = False
            log.warning("lost leadership", lease=f"{self.namespace}/{self.name}", identity=self.identity)
            self.on_stopped_leading()

    def _held_by_me(self) -> bool:
        return (self._observed_spec or {}).get("holderIdentity") == self.identity

    async def release(self) -> None:
        """Give the lease up at shutdown so a follower need not wait for it to expire. A renewal
        cancelled by the shutdown after the API server took it leaves a stale resourceVersion: the
        conflict is answered by reading the lease again and releasing it if this process still holds
        it (without that, the follower waited out the whole lease duration)."""
        if not self.is_leader or not self._observed_spec:
            return
        try:
            for _ in range(2):
                spec = dict(
                    self._observed_spec, holderIdentity="", leaseDurationSeconds=1, renewTime=now_micro()
                )
                try:
                    await self._put(spec)
                    break
                except ApiError as exc:
                    if not exc.conflict:
                        raise
                    self._remember(await self.client.get(LEASES, self.namespace, self.name))
                    if not self._held_by_me():
                        break
        except (TimeoutError, ApiError, aiohttp.ClientError, OSError) as exc:
            log.warning("could not release the lease", error=str(exc))
        self.is_leader = False

    async def _try_acquire_or_renew(self) -> bool:
        try:
            lease = await self.client.get(LEASES, self.namespace, self.name)
        except ApiError as exc:
            if not exc.not_found:
                log.warning("lease read failed", error=str(exc))
                return False
            return await self._create()
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            log.warning("lease read failed", error=str(exc))
            return False
        spec = lease.get("spec") or {}
        self._resource_version = str(lease.get("metadata", {}).get("resourceVersion", ""))
        if spec != self._observed_spec:
            self._observed_spec = spec
            self._observed_at = self.clock()
        holder = spec.get("holderIdentity") or ""
        if holder and holder != self.identity and self.clock() - self._observed_at < self.lease_duration:
            return False
        now = now_micro()
        new_spec = {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": max(1, math.ceil(self.lease_duration)),
            "renewTime": now,
            "acquireTime": spec.get("acquireTime") if holder == self.identity else now,
            "leaseTransitions": int(spec.get("leaseTransitions") or 0)
            + (0 if holder == self.identity else 1),
        }
        try:
            await self._put(new_spec)
        except ApiError as exc:
            if not exc.conflict:
                log.warning("lease update failed", error=str(exc))
            return False
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            log.warning("lease update failed", error=str(exc))
            return False
        return True

    async def _create(self) -> bool:
        now = now_micro()
        spec = {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": max(1, math.ceil(self.lease_duration)),
            "acquireTime": now,
            "renewTime": now,
            "leaseTransitions": 0,
        }
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": self.name, "namespace": self.namespace},
            "spec": spec,
        }
        try:
            created = await self.client.create(LEASES, self.namespace, body)
        except ApiError as exc:
            if exc.not_found:  # creating in a namespace that does not exist (NamespaceLifecycle)
                raise LeaseNamespaceMissingError(self.namespace, self.name) from exc
            if not exc.conflict:  # a conflict: another candidate created it first
                log.warning("lease create failed", lease=f"{self.namespace}/{self.name}", error=str(exc))
            return False
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            log.warning("lease create failed", lease=f"{self.namespace}/{self.name}", error=str(exc))
            return False
        self._remember(created)
        return True

    async def _put(self, spec: dict[str, Any]) -> None:
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {
                "name": self.name,
                "namespace": self.namespace,
                "resourceVersion": self._resource_version,
            },
            "spec": spec,
        }
        self._remember(await self.client.replace(LEASES, self.namespace, self.name, body))

    def _remember(self, lease: dict[str, Any]) -> None:
        self._observed_spec = lease.get("spec") or {}
        self._observed_at = self.clock()
        self._resource_version = str(lease.get("metadata", {}).get("resourceVersion", ""))
