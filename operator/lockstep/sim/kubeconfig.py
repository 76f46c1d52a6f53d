"""A kubeconfig for the emulator: plain HTTP, no credentials."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml


def kubeconfig_for(url: str, namespace: str = "default", name: str = "lockstep-sim") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": name, "cluster": {"server": url}}],
        "users": [{"name": name, "user": {}}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": name, "namespace": namespace}}],
        "current-context": name,
    }


def write_kubeconfig(url: str, path: str | Path, namespace: str = "default") -> Path:
    """Write a kubeconfig pointing at ``url`` (e.g. ``server.url``) and return its path."""
    target = Path(path)
    target.write_text(yaml.safe_dump(kubeconfig_for(url, namespace), sort_keys=False))
    return target
