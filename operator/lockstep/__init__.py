"""lockstep: a gang scheduler for Kubernetes."""

from typing import Any

SCHEDULER_NAME = "lockstep"
GROUP = "scheduling.lockstep.dev"
VERSION = "v1alpha1"
POD_GROUP_LABEL = f"{GROUP}/pod-group"

__all__ = ["GROUP", "POD_GROUP_LABEL", "SCHEDULER_NAME", "VERSION", "__version__"]


def __getattr__(name: str) -> Any:
    """``__version__`` is read from the installed metadata when first asked for: importlib.metadata
    cost every ``lockstep run`` 0.1-0.15 s of start-up (python -X importtime) for ``--version``."""
    if name != "__version__":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib.metadata import PackageNotFoundError, version

    try:
        found = version("lockstep")
    except PackageNotFoundError:  # running from a source tree without an install
        found = "0.0.0+unknown"
    globals()["__version__"] = found
    return found
