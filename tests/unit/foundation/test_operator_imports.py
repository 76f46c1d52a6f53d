"""What ``lockstep run`` imports before it connects: start-up time is part of what users compare."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

PROBE = """
import sys
import lockstep.controller.main as main
main.skip_manifest_validation_import()
import lockstep.controller.runtime, lockstep.kube.credentials
heavy = ("kubernetes_validate", "jsonschema", "lockstep.sim.registry", "celpy")
print(",".join(sorted(m for m in heavy if sys.modules.get(m))))
"""


def test_the_operator_imports_neither_manifest_validation_nor_the_emulator() -> None:
    # kubernetes_asyncio.dynamic imports kubernetes_validate (and jsonschema) whenever it is installed:
    # 1-4 s of start-up on this machine class for validation the operator never does. The emulator's
    # registry brings the CEL interpreter (0.1-0.3 s), which the operator imports at its first selector.
    out = subprocess.run([sys.executable, "-c", PROBE], check=True, capture_output=True, text=True)
    assert out.stdout.strip() == ""


def test_kubernetes_asyncio_still_works_without_kubernetes_validate() -> None:
    probe = (
        "import lockstep.controller.main as main; main.skip_manifest_validation_import(); "
        "import kubernetes_asyncio.dynamic.client as c; print(c.HAS_KUBERNETES_VALIDATE)"
    )
    out = subprocess.run([sys.executable, "-c", probe], check=True, capture_output=True, text=True)
    assert out.stdout.strip() == "False"


def test_a_token_kubeconfig_is_read_without_importing_kubernetes_asyncio(tmp_path: Path) -> None:
    # kubernetes_asyncio's import is 0.24-0.29 s of CPU, the largest single item of start-up.
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters: [{name: c, cluster: {server: 'http://127.0.0.1:1'}}]\n"
        "users: [{name: u, user: {token: t}}]\ncontexts: [{name: c, context: {cluster: c, user: u}}]\n"
    )
    probe = (
        "import asyncio, sys; import lockstep.controller.runtime; "
        "from lockstep.kube.credentials import load_connection_info; "
        f"info = asyncio.run(load_connection_info({str(kubeconfig)!r})); "
        "print(info.token, 'kubernetes_asyncio' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", probe], check=True, capture_output=True, text=True)
    assert out.stdout.split() == ["t", "False"]
