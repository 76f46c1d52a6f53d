"""What ``lockstep run`` imports before it connects: start-up time is part of what users compare."""

from __future__ import annotations

import subprocess
import sys

PROBE = """
import sys
import lockstep.controller.main as main
main.skip_manifest_validation_import()
import lockstep.controller.runtime, lockstep.kube.credentials
heavy = sorted(m for m in ("kubernetes_validate", "jsonschema") if sys.modules.get(m))
print(",".join(heavy))
"""


def test_the_operator_does_not_import_manifest_validation() -> None:
    # kubernetes_asyncio.dynamic imports kubernetes_validate (and jsonschema) whenever it is installed:
    # 1-4 s of start-up on this machine class for validation the operator never does.
    out = subprocess.run([sys.executable, "-c", PROBE], check=True, capture_output=True, text=True)
    assert out.stdout.strip() == ""


def test_kubernetes_asyncio_still_works_without_kubernetes_validate() -> None:
    probe = (
        "import lockstep.controller.main as main; main.skip_manifest_validation_import(); "
        "import kubernetes_asyncio.dynamic.client as c; print(c.HAS_KUBERNETES_VALIDATE)"
    )
    out = subprocess.run([sys.executable, "-c", probe], check=True, capture_output=True, text=True)
    assert out.stdout.strip() == "False"
