"""Members of a deleted PodGroup are told why they wait (no PodGroup status can say it any more);
pods created before their PodGroup, the usual order, get no write while it is still to come."""

from __future__ import annotations

from sched_helpers import gang, make_node, make_pod, make_scheduler, settle

from lockstep.scheduler.framework import Code, GroupKey


async def test_members_of_a_deleted_podgroup_get_podscheduled_false_once() -> None:
    scheduler, api, cache = make_scheduler()
    cache.upsert_node(make_node("n0", cpu="16"))
    key = GroupKey("default", "g")
    cache.upsert_podgroup(gang("g", 3))
    for i in range(2):
        api.add(make_pod(f"p{i}", group="g"))
    await settle(scheduler)
    assert api.patch_calls == []  # short of members: the PodGroup status says so

    cache.delete_podgroup("default", "g")
    await settle(scheduler)
    assert scheduler.attempts[key].code is Code.WAIT
    assert sorted(call[0] for call in api.patch_calls) == ["default/p0", "default/p1"]
    assert {call[2] for call in api.patch_calls} == {"PodGroupNotFound"}

    cache.upsert_podgroup(gang("g", 2))  # created again: the gang binds
    await settle(scheduler)
    assert scheduler.attempts[key].code is Code.SUCCESS
    assert all(p.node_name == "n0" for p in api.pods.values())
