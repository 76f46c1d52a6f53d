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
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.parse
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import orjson
import pytest

T = TypeVar("T")

NAMESPACE = "hostile"
PODGROUPS = "/apis/scheduling.lockstep.dev/v1alpha1/namespaces/{ns}/podgroups"
CLAIMS = "/apis/resource.k8s.io/v1/namespaces/{ns}/resourceclaims"
PODS = "/api/v1/namespaces/{ns}/pods"
REPO_ROOT = Path(__file__).resolve().parents[2]


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


class OperatorProcess:
    """``lockstep run`` against a kubeconfig, its JSON log captured to a file."""

    def __init__(self, kubeconfig: Path, log_path: Path, extra_env: dict[str, str] | None = None) -> None:
        self.kubeconfig = kubeconfig
        self.log_path = log_path
        self.extra_env = extra_env or {}
        self.process: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self) -> None:
        env = {
            **os.environ,
            "LOCKSTEP_KUBECONFIG": str(self.kubeconfig),
            "LOCKSTEP_LOG_FORMAT": "json",
            "LOCKSTEP_METRICS_BIND_ADDRESS": "127.0.0.1:0",
            "LOCKSTEP_HEALTH_BIND_ADDRESS": "127.0.0.1:0",
            "LOCKSTEP_LEADER_ELECT": "false",
            **self.extra_env,
        }
        log_file = self.log_path.open("ab")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "lockstep", "run"], env=env, stdout=log_file, stderr=subprocess.STDOUT
        )
        log_file.close()
        self.starts += 1

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

    def log_lines(self) -> list[dict[str, Any]]:
        """Every JSON log line so far; a line that is not JSON is kept as {'raw': text}."""
        if not self.log_path.exists():
            return []
        lines: list[dict[str, Any]] = []
        for raw in self.log_path.read_bytes().splitlines():
            if not raw.strip():
                continue
            try:
                parsed = orjson.loads(raw)
            except orjson.JSONDecodeError:
                parsed = None
            lines.append(parsed if isinstance(parsed, dict) else {"raw": raw.decode(errors="replace")})
        return lines
