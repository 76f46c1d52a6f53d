from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from harness.api import classify, load_kubeconfig
from harness.procs import parse_cpu_seconds, parse_status_mb
from harness.results import status_lags
from harness.tracker import Tracker
from harness.workloads import GangSpec


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize(
    ("method", "path", "params", "expected"),
    [
        ("POST", "/api/v1/namespaces/bench/pods", None, ("create", "pods")),
        ("POST", "/api/v1/namespaces/bench/pods/p-0/binding", None, ("create", "pods/binding")),
        ("PATCH", "/api/v1/namespaces/bench/pods/p-0/status", None, ("patch", "pods/status")),
        ("GET", "/api/v1/namespaces/bench/pods", {"watch": "true"}, ("watch", "pods")),
        ("GET", "/api/v1/pods", None, ("list", "pods")),
        ("GET", "/api/v1/nodes/node-1", None, ("get", "nodes")),
        (
            "DELETE",
            "/apis/scheduling.lockstep.dev/v1alpha1/namespaces/bench/podgroups/g",
            None,
            ("delete", "podgroups"),
        ),
        (
            "PUT",
            "/apis/resource.k8s.io/v1/namespaces/bench/resourceclaims/c/status",
            None,
            ("update", "resourceclaims/status"),
        ),
        ("POST", "/api/v1/namespaces", None, ("create", "namespaces")),
        ("GET", "/api/v1/namespaces/bench", None, ("get", "namespaces")),
    ],
)
def test_requests_are_classified_like_the_apiserver_request_info(
    method: str, path: str, params: dict[str, str] | None, expected: tuple[str, str]
) -> None:
    assert classify(method, path, params) == expected


def test_classify_rejects_non_resource_paths() -> None:
    with pytest.raises(ValueError, match="not a Kubernetes resource path: /__sim/stats"):
        classify("GET", "/__sim/stats")


def test_kubeconfig_current_context_server_and_token(tmp_path: Path) -> None:
    path = tmp_path / "kubeconfig"
    path.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: sim\n"
        "clusters:\n- name: other\n  cluster: {server: 'http://127.0.0.1:1'}\n"
        "- name: simc\n  cluster: {server: 'http://127.0.0.1:6443/'}\n"
        "contexts:\n- name: sim\n  context: {cluster: simc, user: admin}\n"
        "users:\n- name: admin\n  user: {token: abc}\n"
    )
    target = load_kubeconfig(path)
    assert (target.server, target.token, target.ssl_context) == ("http://127.0.0.1:6443", "abc", None)


def test_kubeconfig_with_https_and_insecure_skip_verify(tmp_path: Path) -> None:
    path = tmp_path / "kubeconfig"
    path.write_text(
        "current-context: c\nclusters:\n- name: k\n"
        "  cluster: {server: 'https://h:1', insecure-skip-tls-verify: true}\n"
        "contexts:\n- name: c\n  context: {cluster: k}\n"
    )
    target = load_kubeconfig(path)
    assert target.ssl_context is not None and not target.ssl_context.check_hostname


def test_kubeconfig_errors_name_the_file_and_field(tmp_path: Path) -> None:
    path = tmp_path / "kubeconfig"
    path.write_text("clusters:\n- name: k\n  cluster: {}\ncontexts:\n- name: c\n  context: {cluster: k}\n")
    with pytest.raises(ValueError, match=r"clusters\[k\]\.server is missing"):
        load_kubeconfig(path)
    with pytest.raises(ValueError, match="cannot read"):
        load_kubeconfig(tmp_path / "missing")


def test_proc_stat_cpu_seconds_survive_spaces_and_parens_in_the_command() -> None:
    line = "1234 (python (x) y) S 1 1234 1234 0 -1 4194560 1000 0 0 0 250 50 0 0 20 0 4 0 100 0 0"
    assert parse_cpu_seconds(line, 100) == pytest.approx(3.0)


def test_proc_status_peak_rss_is_vmhwm() -> None:
    status = "Name:\tpython\nVmPeak:\t  900000 kB\nVmHWM:\t  204800 kB\nVmRSS:\t 100 kB\n"
    assert parse_status_mb(status) == pytest.approx(209.7152)
    assert parse_status_mb(status, "VmRSS") == pytest.approx(0.1024)
    with pytest.raises(ValueError, match="VmHWM"):
        parse_status_mb("Name:\tx\n")


def test_process_usage_of_this_process_is_plausible() -> None:
    import os

    from harness.procs import process_usage

    usage = process_usage(os.getpid())
    assert usage.cpu_seconds > 0
    assert 10 < usage.rss_peak_mb < 5000


async def test_tracker_completes_when_counted_pods_are_bound_and_creation_finished() -> None:
    clock = FakeClock()
    tracker = Tracker(target=2, clock=clock)
    counted = GangSpec("a", pods=2, min_count=2, cpu_millis=1)
    other = GangSpec("b", pods=1, min_count=2, cpu_millis=1, counted=False)
    tracker.add_gang(counted)
    tracker.add_gang(other)
    clock.now = 1.0
    tracker.created("a-0")
    tracker.created("a-1")
    tracker.bound("b-0")
    tracker.bound("a-0")
    clock.now = 2.0
    tracker.bound("a-0")
    tracker.bound("a-1")
    tracker.bound("unknown-pod")
    assert tracker.pods["a-0"].bound_at == 1.0
    assert tracker.counted_bound == 2
    assert not tracker.complete.is_set(), "not complete while the load generator is still creating"
    tracker.creation_finished()
    assert tracker.complete.is_set()
    assert tracker.bound_count == 3
    assert not tracker.settled.is_set(), "settled only once the kubelets marked every bound pod Running"
    for name in ("a-0", "a-1", "a-1", "unknown-pod"):
        tracker.started(name)
    assert not tracker.settled.is_set()
    tracker.started("b-0")
    assert tracker.settled.is_set()


def test_tracker_settles_only_when_template_claims_are_recorded() -> None:
    tracker = Tracker(target=1)
    tracker.add_gang(GangSpec("c", pods=2, min_count=1, cpu_millis=1, claim="template"))
    tracker.creation_finished()
    tracker.bound("c-0")
    tracker.started("c-0")
    assert tracker.complete.is_set() and not tracker.settled.is_set()
    tracker.claims_recorded("c-1")
    assert not tracker.settled.is_set()
    tracker.claims_recorded("c-0")
    assert tracker.settled.is_set(), "the unbound pod's claim was the emulator's work too, and it is done"


def test_tracker_drops_deleted_gangs_from_the_count() -> None:
    tracker = Tracker(target=2)
    gang = GangSpec("a", pods=2, min_count=2, cpu_millis=1)
    tracker.add_gang(gang)
    tracker.bound("a-0")
    tracker.remove_gang(gang)
    assert (tracker.counted_bound, tracker.bound_count) == (0, 0)
    assert not tracker.pods and not tracker.awaiting_running
    tracker.creation_finished()
    assert not tracker.complete.is_set()
    with pytest.raises(ValueError, match="at least 1 pod"):
        Tracker(target=0)
    tracker.add_gang(gang)
    with pytest.raises(ValueError, match="pod a-0 of gang a is already tracked"):
        tracker.add_gang(gang)


def test_bench_command_reports_a_missing_checkout(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from lockstep import benchmarks

    monkeypatch.setattr(benchmarks, "bench_script", lambda: tmp_path / "bench" / "run.py")
    assert benchmarks.bench_command(argparse.Namespace(workloads=[])) == benchmarks.NOT_A_CHECKOUT_EXIT


def test_bench_command_finds_this_checkouts_run_script() -> None:
    from lockstep import benchmarks

    assert benchmarks.bench_script() == Path(__file__).resolve().parents[3] / "bench" / "run.py"


def test_top_frames_rank_self_time_and_count_total_time_once_per_stack() -> None:
    from harness.profile import top_frames

    collapsed = [
        "main;loop;handle;orjson_loads 30\n",
        "main;loop;handle 10\n",
        "main;loop;bind;post 50\n",
        "main;recurse;recurse 10\n",
        "garbage line\n",
    ]
    frames = top_frames(collapsed, limit=3)
    assert [f.frame for f in frames] == ["post", "orjson_loads", "handle"]
    assert frames[0].self_share == 0.5 and frames[0].total_share == 0.5
    assert frames[2].self_share == 0.1 and frames[2].total_share == 0.4
    assert top_frames([]) == []
    # By total time: "main" and "loop" are on (nearly) every stack and say nothing; "recurse" counts
    # once per stack.
    by_total = top_frames(collapsed, limit=10, by_total=True)
    assert [(f.frame, f.total_share) for f in by_total] == [
        ("bind", 0.5),
        ("post", 0.5),
        ("handle", 0.4),
        ("orjson_loads", 0.3),
        ("recurse", 0.1),
    ]


def test_unscheduled_reasons_rank_the_podgroups_false_conditions() -> None:
    from harness.runner import unscheduled_reasons

    def group(status: str, reason: str, message: str) -> dict[str, object]:
        condition = {"type": "PodGroupScheduled", "status": status, "reason": reason, "message": message}
        return {"status": {"conditions": [condition]}}

    listing = {
        "items": [
            group("False", "Unschedulable", "reservedFor would need 257 entries"),
            group("True", "Scheduled", "ok"),
            group("False", "Waiting", "minCount (8) is not yet satisfied"),
            group("False", "Waiting", "minCount (8) is not yet satisfied"),
            {"status": {}},
        ]
    }
    assert unscheduled_reasons(listing) == [
        "2 PodGroup(s) Waiting: minCount (8) is not yet satisfied",
        "1 PodGroup(s) Unschedulable: reservedFor would need 257 entries",
    ]


def test_tracker_settles_without_completion_when_nothing_was_bound() -> None:
    tracker = Tracker(target=4)
    tracker.add_gang(GangSpec("stuck", pods=4, min_count=4, cpu_millis=1))
    assert not tracker.settled.is_set(), "not settled while the load generator is still creating"
    tracker.creation_finished()
    assert tracker.settled.is_set() and not tracker.complete.is_set()


def test_operator_metrics_deltas_by_label() -> None:
    from harness.opmetrics import CONFLICTS, REQUESTS, delta, parse_prometheus, writes

    before = parse_prometheus(
        "# HELP lockstep_api_requests_total Requests\n# TYPE lockstep_api_requests_total counter\n"
        'lockstep_api_requests_total{code="201",method="POST"} 5.0\n'
        'lockstep_api_requests_total{code="200",method="PATCH"} 2.0\n'
        'lockstep_api_requests_created{code="201",method="POST"} 1.7e9\n'
    )
    after = parse_prometheus(
        'lockstep_api_requests_total{code="201",method="POST"} 105.0\n'
        'lockstep_api_requests_total{code="409",method="POST"} 3.0\n'
        'lockstep_api_requests_total{method="PATCH",code="200"} 12.0\n'
        'lockstep_api_requests_total{code="200",method="GET"} 7.0\n'
        'lockstep_api_conflicts_total{resource="pods/binding"} 3.0\n'
        "lockstep_leader 1.0\n"
    )
    by_method = delta(before, after, REQUESTS, "method")
    assert by_method == {"GET": 7.0, "PATCH": 10.0, "POST": 103.0}
    assert writes(by_method) == 113.0
    assert delta(before, after, CONFLICTS, "resource") == {"pods/binding": 3.0}
    with pytest.raises(ValueError, match="cannot parse line"):
        parse_prometheus("{broken} 1\n")


def test_tracker_without_a_scheduler_does_not_wait_for_pods_with_claims_to_run() -> None:
    clock = FakeClock()
    tracker = Tracker(target=1, clock=clock, claims_allocated=False)
    tracker.add_gang(GangSpec("c", pods=1, min_count=1, cpu_millis=1, claim="template"))
    tracker.creation_finished()
    tracker.bound("c-0")
    clock.now = 4.0
    tracker.claims_recorded("c-0")
    assert tracker.settled.is_set()
    assert tracker.claims_recorded_at == [4.0]


def test_status_lag_is_the_podgroup_counting_every_member_after_the_last_bind() -> None:
    clock = FakeClock()
    tracker = Tracker(target=4, clock=clock)
    for name in ("a", "b", "c"):
        tracker.add_gang(GangSpec(name, pods=2, min_count=2, cpu_millis=1))
    for clock.now, pod in ((1.0, "a-0"), (1.2, "a-1"), (1.0, "b-0"), (1.1, "b-1"), (1.0, "c-0")):
        tracker.bound(pod)
    for clock.now, gang, scheduled in ((1.3, "a", 1), (1.5, "a", 2), (1.6, "a", 2), (1.0, "b", 2)):
        tracker.group_status(gang, scheduled)
    # a: 1.5 - 1.2; b: its status was seen before the pod watch saw its last bind; c: incomplete.
    assert [round(lag, 3) for lag in sorted(status_lags(tracker.pods, tracker.status_at))] == [0.0, 0.3]
