"""Test harness for the reliability suite: the simulated cluster on a background event loop, a small
synchronous HTTP client for it, kubeconfig writing, and the operator as its own process.

The cluster runs in a thread so that hypothesis-driven tests (synchronous) and subprocesses (kubectl,
``lockstep run``) talk to it over real HTTP, exactly as they would to a kube-apiserver.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import importlib
import itertools
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
import orjson
import pytest

from lockstep.sim.invariants import ClusterState, fetch_cluster_state

T = TypeVar("T")

NAMESPACE = "hostile"
PODGROUPS = "/apis/scheduling.lockstep.dev/v1alpha1/namespaces/{ns}/podgroups"
CLAIMS = "/apis/resource.k8s.io/v1/namespaces/{ns}/resourceclaims"
PODS = "/api/v1/namespaces/{ns}/pods"
REPO_ROOT = Path(__file__).resolve().parents[2]
DEVICE_CLASS = "gpu.sim.lockstep.dev"
GROUP_LABEL = "scheduling.lockstep.dev/pod-group"
_serial = itertools.count()


@dataclass(frozen=True, slots=True)
class Response:
    status: int
    body: Any
    headers: dict[str, str]

    @property
    def message(self) -> str:
        return str(self.body.get("message", "")) if isinstance(self.body, dict) else str(self.body)

    def cause_fields(self) -> list[str]:
        details = self.body.get("details") if isinstance(self.body, dict) else None
        causes = details.get("causes") if isinstance(details, dict) else None
        return [str(c.get("field", "")) for c in causes or [] if isinstance(c, dict)]


class Http:
    """Synchronous JSON client over one keep-alive connection (plain http, no auth)."""

    def __init__(self, base_url: str) -> None:
        parsed = urllib.parse.urlsplit(base_url)
        self.base_url = base_url.rstrip("/")
        self._host = parsed.hostname or "127.0.0.1"
        self._port = parsed.port or 80
        self._connection: http.client.HTTPConnection | None = None
        self._lock = threading.Lock()

    def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        query: dict[str, str] | None = None,
        content_type: str = "application/json",
    ) -> Response:
        target = path + ("?" + urllib.parse.urlencode(query) if query else "")
        payload = None if body is None else orjson.dumps(body)
        headers = {"Accept": "application/json"}
        if payload is not None:
            headers["Content-Type"] = content_type
        with self._lock:
            for attempt in range(2):
                if self._connection is None:
                    self._connection = http.client.HTTPConnection(self._host, self._port, timeout=60)
                try:
                    self._connection.request(method, target, body=payload, headers=headers)
                    raw = self._connection.getresponse()
                    data = raw.read()
                    break
                except (ConnectionError, http.client.HTTPException):
                    self._connection.close()
                    self._connection = None
                    if attempt:
                        raise
        try:
            parsed: Any = orjson.loads(data) if data else {}
        except orjson.JSONDecodeError:
            parsed = data.decode(errors="replace")
        return Response(raw.status, parsed, {k: v for k, v in raw.getheaders()})

    def get(self, path: str, query: dict[str, str] | None = None) -> Response:
        return self.call("GET", path, query=query)

    def post(self, path: str, body: Any, query: dict[str, str] | None = None) -> Response:
        return self.call("POST", path, body, query)

    def delete(self, path: str) -> Response:
        return self.call("DELETE", path)

    def close(self) -> None:
        with self._lock:
            if self._connection is not None:
                self._connection.close()
                self._connection = None

    def ensure_namespace(self, name: str) -> None:
        response = self.post(
            "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
        )
        assert response.status in (201, 409), (
            f"creating namespace {name}: {response.status} {response.message}"
        )


class BackgroundLoop:
    """An asyncio loop in a daemon thread; ``run`` executes a coroutine on it and waits."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="sim-loop", daemon=True)
        self._thread.start()

    def run(self, coroutine: Coroutine[Any, Any, T], timeout: float = 120) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=10)
        self.loop.close()


def sim_available() -> str | None:
    """None if the simulated cluster can be imported, else why not."""
    try:
        importlib.import_module("lockstep.sim.cluster")
        importlib.import_module("lockstep.sim.apiserver")
    except ImportError as exc:
        return f"simulated cluster not available: {exc}"
    return None


@dataclass
class RunningCluster:
    url: str
    http: Http
    cluster: Any
    loop: BackgroundLoop
    kubeconfig: Path

    def run(self, coroutine: Coroutine[Any, Any, T], timeout: float = 120) -> T:
        return self.loop.run(coroutine, timeout)

    def state(self) -> ClusterState:
        """Nodes, pods, PodGroups and claims as the invariant checker reads them."""
        return self.run(_fetch_state(self.url))


async def _fetch_state(url: str) -> ClusterState:
    async with aiohttp.ClientSession() as session:
        return await fetch_cluster_state(session, url)


def write_kubeconfig(url: str, path: Path) -> Path:
    path.write_text(
        "apiVersion: v1\nkind: Config\n"
        f"clusters:\n- name: sim\n  cluster:\n    server: {url}\n"
        "users:\n- name: sim\n  user: {}\n"
        "contexts:\n- name: sim\n  context:\n    cluster: sim\n    user: sim\n"
        "current-context: sim\n"
    )
    return path


@contextlib.contextmanager
def running_cluster(tmp_dir: Path, **cluster_args: Any) -> Iterator[RunningCluster]:
    """A started SimCluster (skips the test if the simulator is not there yet)."""
    reason = sim_available()
    if reason is not None:
        pytest.skip(reason)
    from lockstep.sim.cluster import SimCluster

    loop = BackgroundLoop()
    cluster = SimCluster(**cluster_args)
    try:
        url = loop.run(cluster.start())
    except BaseException:
        loop.close()
        raise
    client = Http(url)
    try:
        yield RunningCluster(url, client, cluster, loop, write_kubeconfig(url, tmp_dir / "kubeconfig"))
    finally:
        client.close()
        loop.run(cluster.stop())
        loop.close()


def kubectl_path() -> str | None:
    return shutil.which("kubectl")


def wait_until(
    predicate: Callable[[], T], timeout: float, interval: float = 0.1, what: str = "condition"
) -> T:
    """Poll until predicate returns something truthy; fail the test with ``what`` on timeout."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


# --- the operator as a separate process ----------------------------------------------------------------


def operator_available() -> str | None:
    """None if ``lockstep run`` is built, else why it cannot be started."""
    try:
        importlib.import_module("lockstep.controller.main")
    except ImportError as exc:
        return f"operator not available: {exc}"
    return None


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


class OperatorProcess:
    """``lockstep run`` against a kubeconfig, its JSON log captured to a file."""

    def __init__(self, kubeconfig: Path, log_path: Path, extra_env: dict[str, str] | None = None) -> None:
        self.kubeconfig = kubeconfig
        self.log_path = log_path
        self.extra_env = extra_env or {}
        self.process: subprocess.Popen[bytes] | None = None
        self.metrics_url = ""
        self.health_url = ""

    def start(self) -> None:
        metrics_port, health_port = free_port(), free_port()
        self.metrics_url = f"http://127.0.0.1:{metrics_port}/metrics"
        self.health_url = f"http://127.0.0.1:{health_port}/healthz"
        env = {
            **os.environ,
            "LOCKSTEP_KUBECONFIG": str(self.kubeconfig),
            "LOCKSTEP_LOG_FORMAT": "json",
            "LOCKSTEP_METRICS_BIND_ADDRESS": f"127.0.0.1:{metrics_port}",
            "LOCKSTEP_HEALTH_BIND_ADDRESS": f"127.0.0.1:{health_port}",
            "LOCKSTEP_LEADER_ELECT": "false",
            **self.extra_env,
        }
        log_file = self.log_path.open("ab")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "lockstep", "run"], env=env, stdout=log_file, stderr=subprocess.STDOUT
        )
        log_file.close()

    def kill(self) -> None:
        """SIGKILL: no cleanup, no lease release, exactly what a crashed node does."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=10)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()

    def exited(self) -> int | None:
        return None if self.process is None else self.process.poll()


def http_get_text(url: str, timeout: float = 5) -> tuple[int, str]:
    """GET a plain URL (metrics, health); (0, error text) if nothing answers."""
    parsed = urllib.parse.urlsplit(url)
    connection = http.client.HTTPConnection(
        parsed.hostname or "127.0.0.1", parsed.port or 80, timeout=timeout
    )
    try:
        connection.request("GET", parsed.path or "/")
        response = connection.getresponse()
        return response.status, response.read().decode(errors="replace")
    except OSError as exc:
        return 0, str(exc)
    finally:
        connection.close()


@contextlib.contextmanager
def running_operator(sim: RunningCluster, log_path: Path, **extra_env: str) -> Iterator[OperatorProcess]:
    """``lockstep run`` against ``sim`` until its health endpoint answers; on exit the operator must
    still be running (it never crashes), then it is stopped."""
    reason = operator_available()
    if reason is not None:
        pytest.skip(reason)
    operator = OperatorProcess(sim.kubeconfig, log_path, {"LOCKSTEP_LOG_LEVEL": "debug", **extra_env})
    operator.start()
    try:
        wait_until(
            lambda: operator.exited() is not None or http_get_text(operator.health_url)[0] == 200,
            timeout=60,
            what="the operator's /healthz",
        )
        assert operator.exited() is None, (
            f"lockstep run exited with {operator.exited()}: {log_path.read_text()[-3000:]}"
        )
        yield operator
        assert operator.exited() is None, (
            f"lockstep run crashed ({operator.exited()}): {log_path.read_text()[-3000:]}"
        )
    finally:
        operator.stop()


# --- objects the operator tests create ---------------------------------------------------------------


def unique(prefix: str) -> str:
    return f"{prefix}-{next(_serial)}"


def podgroup(name: str, min_count: int | None, claims: list[dict[str, str]] | None = None) -> dict[str, Any]:
    policy: dict[str, Any] = {"gang": {"minCount": min_count}} if min_count else {"basic": {}}
    spec: dict[str, Any] = {"schedulingPolicy": policy}
    if claims:
        spec["resourceClaims"] = claims
    return {
        "apiVersion": "scheduling.lockstep.dev/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": name},
        "spec": spec,
    }


def pod(
    name: str,
    group: str,
    cpu: str = "100m",
    claim: dict[str, str] | None = None,
    node_selector: dict[str, str] | None = None,
) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "main", "image": "pause", "resources": {"requests": {"cpu": cpu}}}
    spec: dict[str, Any] = {"schedulerName": "lockstep", "containers": [container]}
    if claim is not None:
        spec["resourceClaims"] = [{"name": "gpu", **claim}]
        container["resources"]["claims"] = [{"name": "gpu"}]
    if node_selector is not None:
        spec["nodeSelector"] = node_selector
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {GROUP_LABEL: group}},
        "spec": spec,
    }


def claim(name: str, device_class: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": device_class}}]}},
    }


def create(sim: RunningCluster, path: str, body: dict[str, Any]) -> None:
    response = sim.http.post(path.format(ns=NAMESPACE), body)
    assert response.status == 201, (
        f"creating {body['metadata']['name']}: {response.status} {response.message}"
    )


def create_group(sim: RunningCluster, group: dict[str, Any] | None, pods: list[dict[str, Any]]) -> None:
    if group is not None:
        create(sim, PODGROUPS, group)
    for body in pods:
        create(sim, PODS, body)


def members(sim: RunningCluster, group: str) -> list[dict[str, Any]]:
    listing = sim.http.get(PODS.format(ns=NAMESPACE), query={"labelSelector": f"{GROUP_LABEL}={group}"})
    assert listing.status == 200, listing.message
    items: list[dict[str, Any]] = listing.body["items"]
    return items


def bound(sim: RunningCluster, group: str) -> int:
    return sum(1 for p in members(sim, group) if p["spec"].get("nodeName"))
