"""lockstep: a gang scheduler for Kubernetes."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("lockstep")
except PackageNotFoundError:  # running from a source tree without an install
    __version__ = "0.0.0+unknown"

SCHEDULER_NAME = "lockstep"
GROUP = "scheduling.lockstep.dev"
VERSION = "v1alpha1"
POD_GROUP_LABEL = f"{GROUP}/pod-group"

__all__ = ["GROUP", "POD_GROUP_LABEL", "SCHEDULER_NAME", "VERSION", "__version__"]
