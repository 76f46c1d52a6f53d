"""``lockstep`` command line: run | sim | demo | bench | explain | plan."""

from __future__ import annotations

import argparse
import gc
import importlib
from collections.abc import Callable, Sequence
from enum import Enum
from typing import Any, get_args, get_origin

from lockstep import __version__
from lockstep.config import Settings, load_settings
from lockstep.sim import OPTIONAL_CRD_NAMES
from lockstep.sim.features import FeatureGates
from lockstep.sim.versions import DEFAULT_KUBE_VERSION, KUBE_VERSIONS

USAGE_EXIT = 2

# subcommand -> "module:function" taking the parsed argparse namespace and returning an exit code;
# imported only when that subcommand runs, so `lockstep --help` stays fast.
COMMANDS: dict[str, str] = {
    "run": "lockstep.controller.main:run_command",
    "sim": "lockstep.sim.cli:sim_command",
    "demo": "lockstep.demo:demo_command",
    "bench": "lockstep.benchmarks:bench_command",
    "explain": "lockstep.explain:explain_command",
    "plan": "lockstep.plan:plan_command",
}
# The operator and the emulator keep tens of thousands of long-lived objects (pods, claims, watch
# windows); at CPython's default thresholds (700, 10, 10) full collections of that heap took about 40%
# of the operator's CPU and 25% of the emulator's in the claim-template benchmark.
LONG_RUNNING_COMMANDS = frozenset({"run", "sim", "demo"})
GC_THRESHOLDS = (50_000, 20, 20)


def _flag(field_name: str) -> str:
    return "--" + field_name.replace("_", "-")


def add_settings_arguments(parser: argparse.ArgumentParser) -> None:
    """One flag per Settings field; defaults stay None so the environment can supply them."""
    group = parser.add_argument_group("settings (each also read from LOCKSTEP_<NAME>)")
    for name, field in Settings.model_fields.items():
        annotation = field.annotation
        help_text = field.description or ""
        default = field.get_default(call_default_factory=True)
        if isinstance(default, dict):
            default = ",".join(f"{k}={str(v).lower()}" for k, v in sorted(default.items()))
        elif isinstance(default, list):
            default = ",".join(default) or "all"
        elif isinstance(default, Enum):
            default = default.value
        help_text += f" [env LOCKSTEP_{name.upper()}, default: {default}]"
        if annotation is bool:
            group.add_argument(_flag(name), dest=name, action=argparse.BooleanOptionalAction, help=help_text)
            continue
        kwargs: dict[str, Any] = {"dest": name, "help": help_text, "metavar": name.upper()}
        enum_type = next(
            (a for a in (annotation, *get_args(annotation)) if isinstance(a, type) and issubclass(a, Enum)),
            None,
        )
        if enum_type is not None:
            kwargs["choices"] = [m.value for m in enum_type]
            kwargs.pop("metavar")
        elif annotation in (float, int):
            kwargs["type"] = annotation
        elif get_origin(annotation) in (list, dict):
            kwargs["type"] = str
        group.add_argument(_flag(name), **kwargs)


def settings_from_args(args: argparse.Namespace) -> Settings:
    return load_settings(**{name: getattr(args, name, None) for name in Settings.model_fields})


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="lockstep",
        description="lockstep: a gang scheduler for Kubernetes. Places a PodGroup's pods all-or-nothing "
        "together with the DRA ResourceClaims they need.",
    )
    parser.add_argument("--version", action="version", version=f"lockstep {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    run = sub.add_parser("run", help="run the scheduler against a cluster (kubeconfig or in-cluster)")
    add_settings_arguments(run)

    sim = sub.add_parser("sim", help="start the embedded simulated cluster (API server, nodes, DRA driver)")
    sim.add_argument("--nodes", type=int, default=10, help="number of simulated nodes (default 10)")
    sim.add_argument(
        "--devices-per-node", type=int, default=8, help="DRA devices published per node (default 8)"
    )
    sim.add_argument("--port", type=int, default=0, help="API server port on 127.0.0.1 (default: any free)")
    sim.add_argument(
        "--kubeconfig", default=None, help="where to write the kubeconfig (default: a temporary file)"
    )
    sim.add_argument(
        "--feature-gates",
        default=None,
        help="kube-apiserver feature gates of the simulated API server, Name=true|false pairs, "
        f"comma-separated; the gates and defaults are the --kube-version's (default: {FeatureGates()})",
    )
    sim.add_argument(
        "--kube-version",
        default=DEFAULT_KUBE_VERSION,
        choices=list(KUBE_VERSIONS),
        help="the Kubernetes version the API server emulates: its Workload API (1.36: scheduling.k8s.io/"
        f"v1alpha2; 1.37: v1beta1 and v1alpha3), OpenAPI and feature gates (default {DEFAULT_KUBE_VERSION})",
    )

    sim.add_argument(
        "--install-crds",
        default="",
        help="other schedulers' CRDs to install, comma-separated: "
        f"{', '.join(OPTIONAL_CRD_NAMES)} (default: none; kubectl apply of a CRD works too)",
    )

    sim.add_argument(
        "--pod-start-seconds",
        type=float,
        default=0.1,
        metavar="SECONDS",
        help="how long a simulated kubelet takes to start a bound pod's containers (default 0.1)",
    )
    sim.add_argument(
        "--node-monitor-grace-period",
        type=float,
        default=50.0,
        metavar="SECONDS",
        help="kube-controller-manager's: how long a node's kubelet may be silent (a Node annotated "
        "sim.lockstep.dev/lost=true, or deleted) before the node is Ready Unknown and tainted "
        "unreachable (default 50)",
    )
    sim.add_argument(
        "--node-monitor-period",
        type=float,
        default=5.0,
        metavar="SECONDS",
        help="kube-controller-manager's: how often the node lifecycle controller checks (default 5)",
    )
    sim.add_argument(
        "--pod-gc-period",
        type=float,
        default=20.0,
        metavar="SECONDS",
        help="how often the pod garbage collector runs; it deletes the pods of a deleted Node once "
        "the node has been gone twice that long (default 20, upstream's 20 s and 40 s)",
    )
    sim.add_argument(
        "--write-latency-ms",
        type=float,
        default=0.0,
        metavar="MS",
        help="how long each create, update, patch and delete waits before it is applied and answered, "
        "as kube-apiserver waits for etcd's commit (default 0; etcd on a good disk commits in 2-20 ms)",
    )

    demo = sub.add_parser("demo", help="start a simulated cluster and the operator, apply examples/")
    demo.add_argument("--keep", action="store_true", help="keep the cluster running after the demo")
    demo.add_argument("--examples", default=None, help="directory of example manifests (default: examples/)")
    demo.add_argument(
        "--workdir", default=None, help="where to write the kubeconfig and operator log (default: a temp dir)"
    )
    demo.add_argument(
        "--timeout", type=float, default=90.0, help="seconds to wait for the expected phases (default 90)"
    )

    bench = sub.add_parser("bench", help="run the benchmark workloads in bench/")
    bench.add_argument("workloads", nargs="*", help="workloads to run (default: all)")

    explain = sub.add_parser("explain", help="explain why a PodGroup is or is not scheduled")
    explain.add_argument(
        "podgroup",
        metavar="NAMESPACE/PODGROUP",
        help="a lockstep PodGroup, or podgroups.scheduling.k8s.io/NAME for upstream's (in --namespace)",
    )
    explain.add_argument(
        "-n",
        "--namespace",
        default="default",
        help="namespace of a podgroups.scheduling.k8s.io/NAME reference",
    )
    explain.add_argument("--kubeconfig", default=None, help="kubeconfig to use (default: as lockstep run)")
    explain.add_argument(
        "--feature-gates",
        default=None,
        help="the operator's feature gates, so the dry run allocates as it does (Name=true,...)",
    )
    plan = sub.add_parser(
        "plan",
        help="dry-run PodGroups, pods or Jobs from files against the cluster now: would they fit, where",
        description="Lists the cluster once and runs lockstep's group cycle (and preemption planner) on "
        "that snapshot with the objects of the files added; writes nothing. Exit status: 0 every group "
        "fits now, 1 one does not, 2 bad input or an unreadable cluster.",
    )
    plan.add_argument(
        "-f",
        "--filename",
        action="append",
        required=True,
        metavar="FILE",
        help="YAML of PodGroups, pods and Jobs (repeatable; - reads standard input)",
    )
    plan.add_argument("-o", "--output", choices=["text", "json"], default="text", help="output format")
    plan.add_argument(
        "-n", "--namespace", default="default", help="namespace of objects that name none (default: default)"
    )
    plan.add_argument("--kubeconfig", default=None, help="kubeconfig to use (default: as lockstep run)")
    plan.add_argument(
        "--feature-gates",
        default=None,
        help="the operator's feature gates, so the dry run allocates as it does (Name=true,...)",
    )
    return parser


def _resolve(target: str) -> Callable[[argparse.Namespace], int]:
    module_name, _, func_name = target.partition(":")
    handler: Callable[[argparse.Namespace], int] = getattr(importlib.import_module(module_name), func_name)
    return handler


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return USAGE_EXIT
    if args.command in LONG_RUNNING_COMMANDS:
        gc.set_threshold(*GC_THRESHOLDS)
    return _resolve(COMMANDS[args.command])(args)
