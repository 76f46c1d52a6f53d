"""Real kubectl against a 1.37 emulator: a v1beta1 PodGroup applied, listed by its full resource name,
explained, and refused with the field named."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from lockstep.sim.apiserver import ApiServer
from lockstep.sim.kubeconfig import write_kubeconfig

KUBECTL = shutil.which("kubectl")
pytestmark = pytest.mark.skipif(KUBECTL is None, reason="kubectl is not on PATH")

POD_GROUP = """\
apiVersion: scheduling.k8s.io/v1beta1
kind: PodGroup
metadata:
  name: demo
spec:
  schedulingPolicy:
    gang:
      minCount: {count}
"""


@pytest.fixture(scope="module")
def kubeconfig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    server = ApiServer(kube_version="1.37")
    url = asyncio.run_coroutine_threadsafe(server.start(), loop).result(10)
    path = tmp_path_factory.mktemp("kubectl") / "kubeconfig"
    write_kubeconfig(url, str(path))
    try:
        yield path
    finally:
        asyncio.run_coroutine_threadsafe(server.stop(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        loop.close()


def kubectl(kubeconfig: Path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    assert KUBECTL is not None
    return subprocess.run(
        [KUBECTL, "--kubeconfig", str(kubeconfig), *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_apply_get_explain_and_refuse(kubeconfig: Path) -> None:
    applied = kubectl(kubeconfig, "apply", "-f", "-", stdin=POD_GROUP.format(count=2))
    assert applied.returncode == 0, applied.stderr
    assert applied.stdout.strip() == "podgroup.scheduling.k8s.io/demo created"
    listed = kubectl(kubeconfig, "get", "podgroups.v1beta1.scheduling.k8s.io", "-o", "name")
    assert listed.stdout.split() == ["podgroup.scheduling.k8s.io/demo"], listed.stderr
    explained = kubectl(
        kubeconfig,
        "explain",
        "podgroups.spec.schedulingPolicy.gang",
        "--api-version=scheduling.k8s.io/v1beta1",
    )
    assert explained.returncode == 0, explained.stderr
    assert "VERSION:    v1beta1" in explained.stdout and "minCount" in explained.stdout
    refused = kubectl(kubeconfig, "apply", "-f", "-", stdin=POD_GROUP.format(count=0))
    assert refused.returncode != 0
    assert "spec.schedulingPolicy.gang.minCount: Required value" in refused.stderr
