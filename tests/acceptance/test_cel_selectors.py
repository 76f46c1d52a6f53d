"""DRA selectors using each CEL library of Kubernetes' 1.36 environment, end to end on the emulator.

Each claim's selector picks one device of the node by its ``index`` attribute through a different
library, so a library that evaluated wrongly would leave its pod pending or hand it another device.
"""

from __future__ import annotations

from typing import Any

import pytest
from acceptance_harness import DEVICE_CLASS, NAMESPACE, eventually, pod, simulated_cluster

from lockstep.kube.client import PODS, RESOURCE_CLAIMS, ApiError

D = f'device.attributes["{DEVICE_CLASS}"]'

SELECTORS: dict[str, tuple[str, int]] = {
    # library -> (selector, the index of the only device it matches)
    "optional": (f"{D}.?index.orValue(-1) == 0 && !{D}.?noSuchAttribute.hasValue()", 0),
    "strings": (
        f'"gpu-%d".format([{D}.index]) == "gpu-1" && {D}.model.upperAscii().lowerAscii() == {D}.model',
        1,
    ),
    "sets": (f"sets.contains([2, 9], [{D}.index])", 2),
    "lists": (f"[3, 7].min() == {D}.index && lists.range(8).slice(3, 4) == [{D}.index]", 3),
    "cidr": (f'cidr("10.0.0.4/30").containsIP("10.0.0." + string({D}.index)) && {D}.index < 5', 4),
    "url": (
        f'url("https://gpu" + string({D}.index) + ".example.com:443").getHostname() == "gpu5.example.com"',
        5,
    ),
    "format": (
        f'!format.dns1123Label().validate("gpu-" + string({D}.index)).hasValue() && {D}.index == 6',
        6,
    ),
    "regex": (f'string({D}.index).find("[0-9]+") == "7"', 7),
}


def selector_claim(name: str, expression: str) -> dict[str, Any]:
    request = {
        "name": "gpu",
        "exactly": {"deviceClassName": DEVICE_CLASS, "selectors": [{"cel": {"expression": expression}}]},
    }
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"devices": {"requests": [request]}},
    }


async def test_each_cel_library_selects_its_device() -> None:
    async with simulated_cluster(nodes=1, devices_per_node=8) as env:
        for library, (expression, _) in SELECTORS.items():
            await env.create(selector_claim(library, expression))
            await env.create(pod(library, claims=[{"name": "gpu", "resourceClaimName": library}]))

        async def all_bound() -> bool:
            pods = (await env.client.list(PODS, NAMESPACE))["items"]
            return sum(1 for p in pods if p["spec"].get("nodeName")) == len(SELECTORS)

        await eventually(all_bound, what="every pod bound with the device its selector picks")
        claims = {
            c["metadata"]["name"]: c for c in (await env.client.list(RESOURCE_CLAIMS, NAMESPACE))["items"]
        }
        for library, (_, index) in SELECTORS.items():
            [result] = claims[library]["status"]["allocation"]["devices"]["results"]
            assert result["device"] == f"gpu-{index}", library


def nested_loops(depth: int) -> str:
    """Upstream's "expensive" selector shape: its estimated cost grows tenfold per loop."""
    expression = "true"
    for level in range(depth):
        expression = f"[1, 2, 3, 4, 5, 6, 7, 8, 9, 10].all(x{level}, {expression})"
    return expression


@pytest.mark.parametrize(
    ("expression", "refusal"),
    [
        ("math.greatest(1, 2) == 2", "undeclared reference to 'math.greatest'"),
        ('"%d".format(["a"]) == ""', "decimal clause can only be used on integers, was given string"),
        (nested_loops(7), "Forbidden: too complex, exceeds cost limit"),
        (nested_loops(5), None),  # 45,551 of 1,000,000: accepted
    ],
    ids=[
        "undeclared-function",
        "format-checked-when-compiled",
        "over-the-cost-limit",
        "under-the-cost-limit",
    ],
)
async def test_the_emulator_refuses_selectors_as_kube_apiserver_does(
    expression: str, refusal: str | None
) -> None:
    async with simulated_cluster(nodes=1, devices_per_node=1, start_operator=False) as env:
        if refusal is None:
            await env.create(selector_claim("accepted", expression))
            return
        with pytest.raises(ApiError) as raised:
            await env.create(selector_claim("refused", expression))
        assert raised.value.status == 422
        message = raised.value.api_message
        assert "spec.devices.requests[0].exactly.selectors[0].cel.expression: " in message
        assert refusal in message
