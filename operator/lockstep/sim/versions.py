"""The Kubernetes versions the emulator can be: what ``ApiServer(kube_version=...)``,
``SimCluster(kube_version=...)`` and ``lockstep sim --kube-version`` select.

A version fixes the ``/version`` document, the upstream OpenAPI definitions the emulator serves and
decodes bodies against (the ``kubernetes-validate`` schema set of that release) and the feature gates
it knows with their defaults (``features.gates_of``). ``DEFAULT_KUBE_VERSION`` is the one place the
default is chosen.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# The version the emulator is when none is named; lockstep reads the Workload API of both.
DEFAULT_KUBE_VERSION = "1.37"


@dataclass(frozen=True)
class KubeVersion:
    name: str  # "1.36"
    git_version: str  # "v1.36.2", as /version and the OpenAPI info show it
    git_commit: str
    build_date: str
    go_version: str
    schema_set: str  # the kubernetes-validate schema directory of that release

    @property
    def minor(self) -> int:
        return int(self.name.split(".")[1])

    def version_info(self) -> dict[str, Any]:
        """The ``/version`` document."""
        minor = str(self.minor)
        return {
            "major": "1",
            "minor": minor,
            "emulationMajor": "1",
            "emulationMinor": minor,
            "minCompatibilityMajor": "1",
            "minCompatibilityMinor": str(self.minor - 1),
            "gitVersion": self.git_version,
            "gitCommit": self.git_commit,
            "gitTreeState": "clean",
            "buildDate": self.build_date,
            "goVersion": self.go_version,
            "compiler": "gc",
            "platform": "linux/amd64",
        }


KUBE_VERSIONS: Mapping[str, KubeVersion] = {
    # The version the conformance transcripts were recorded from.
    "1.36": KubeVersion(
        "1.36",
        "v1.36.2",
        "98b35193b2ac7a23a673325f5e9b830ecd5ba406",
        "2026-06-16T10:00:00Z",
        "go1.26.4",
        "v1.36.0-local",
    ),
    # No 1.37 server was recorded: the commit and build date are placeholders.
    "1.37": KubeVersion(
        "1.37",
        "v1.37.0",
        "0000000000000000000000000000000000000000",
        "2026-08-26T10:00:00Z",
        "go1.26.4",
        "v1.37.0-local",
    ),
}


def kube_version(name: str | KubeVersion | None = None) -> KubeVersion:
    """The named version (``"1.37"``, ``"v1.37"``; a patch release such as ``"1.37.1"`` is its minor's);
    None is ``DEFAULT_KUBE_VERSION``. An unknown one is a ValueError naming it and the known ones."""
    if isinstance(name, KubeVersion):
        return name
    wanted = DEFAULT_KUBE_VERSION if name is None else str(name).strip().removeprefix("v")
    short = ".".join(wanted.split(".")[:2])
    known = KUBE_VERSIONS.get(short)
    if known is None:
        raise ValueError(f"unknown kube version {name!r} (known: {', '.join(KUBE_VERSIONS)})")
    return known
