"""``lockstep bench [workload ...]``: runs ``bench/run.py`` of the source checkout.

The harness lives in ``bench/`` beside the package (it starts the emulator and the operator as
processes and is not part of an installed operator), so this command needs the repository.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

import lockstep

NOT_A_CHECKOUT_EXIT = 2


def bench_script() -> Path:
    """``bench/run.py`` of the checkout this package was installed from (editable install)."""
    return Path(lockstep.__file__).resolve().parents[2] / "bench" / "run.py"


def bench_command(args: argparse.Namespace) -> int:
    script = bench_script()
    if not script.is_file():
        print(
            f"lockstep bench: {script} not found: the benchmarks run from a source checkout "
            "(pip install -e . in the repository), not from an installed package",
            file=sys.stderr,
        )
        return NOT_A_CHECKOUT_EXIT
    bench_dir = str(script.parent)
    if bench_dir not in sys.path:
        sys.path.insert(0, bench_dir)
    spec = importlib.util.spec_from_file_location("lockstep_bench_run", script)
    if spec is None or spec.loader is None:
        print(f"lockstep bench: cannot load {script}", file=sys.stderr)
        return NOT_A_CHECKOUT_EXIT
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    exit_code: int = module.main([*args.workloads, "--readme"])
    return exit_code
