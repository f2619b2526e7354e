"""What strict keeps between plans never changes what it refuses.

Strict keeps what a string holds by (key, text), what a body holds by the
component it was made from, and what each generated map holds by the map:
none of them by the hosts or allow-lists, which change with the mirrors.
These tests run the real check over the real generated stacks, and compare
every answer with the one an empty cache gives.
"""

from __future__ import annotations

import dataclasses
import gc
import itertools
import weakref
from typing import Any

import pytest

from function import stack
from function.cache import caches
from function.errors import InputError
from function.model import Accelerator, Cloud
from function.overrides import strict
from function.overrides.registry import Mirrors, Policy
from function.paths import set_path
from function.stack import Component, Stack
from function.tree import copy_maps, holders
from tests.support.overrides import BANK_HOST, bank, ec, fatal, overridden
from tests.support.xr import make_xr

ECR = "123456789012.dkr.ecr.us-east-1.amazonaws.com"
EVIL = "registry.evil.example/tools/x:v1"


def _stack(cloud: str = "EKS") -> Stack:
    loaded = stack.load(Cloud(cloud), Accelerator.NVIDIA)
    assert loaded is not None
    return loaded


def _mirrors(*allowed: str) -> Mirrors:
    return Mirrors(policies=(Policy("bank", "EnvironmentConfig bank: data.servingStack.registry", allowed),))


def _clear() -> None:
    for cache in caches():
        if cache.name.startswith("strict"):
            cache.clear()


def _verdict(loaded: Stack, mirrors: Mirrors, components: list[Component]) -> str | None:
    try:
        strict.enforce(loaded, mirrors, components, (), {}, 1)
    except InputError as err:
        return str(err)
    return None


def _policies(loaded: Stack) -> list[tuple[str, ...]]:
    """Every registry the stack pulls from, then narrower lists: host only, and host and path."""
    return [
        tuple(sorted(strict.stack_hosts(loaded))),
        ("nvcr.io",),
        ("nvcr.io/nvidia", "quay.io/jetstack", "helm.ngc.nvidia.com"),
        (BANK_HOST,),
    ]


@pytest.mark.parametrize("cloud", ["EKS", "GKE", "Existing"])
def test_every_answer_under_every_allow_list_is_the_one_an_empty_cache_gives(cloud: str) -> None:
    loaded = _stack(cloud)
    components = list(loaded.components)
    policies = _policies(loaded)
    fresh = []
    for allowed in policies:
        _clear()
        fresh.append(_verdict(loaded, _mirrors(*allowed), components))
    assert any(v is None for v in fresh) and any(v is not None for v in fresh)  # some pass, some fail
    for _ in range(2):  # each policy after every other one, on the same (kept) components
        for allowed, expected in zip(policies, fresh, strict=True):
            assert _verdict(loaded, _mirrors(*allowed), components) == expected, allowed


def test_a_string_refused_under_one_allow_list_passes_under_a_wider_one_and_is_refused_again() -> None:
    team = ec(
        "team", {"priority": 99, "components": {"cert-manager": {"values": {"extraArgs": [f"--image={ECR}/x:v1"]}}}}
    )
    narrow = ec("bank", bank(allowedRegistries=[BANK_HOST]))
    first = fatal(make_xr("GKE"), narrow, team)
    assert f"cert-manager spec.forProvider.values.extraArgs[0]: {ECR}/x:v1" in first
    overridden(make_xr("GKE"), ec("bank", bank(allowedRegistries=[BANK_HOST, ECR])), team)
    assert fatal(make_xr("GKE"), narrow, team) == first


def _nested_map(values: dict[str, Any]) -> str:
    """The dot path of a map two levels down whose parent holds other maps: what a rebuild shares."""
    for key, child in values.items():
        if isinstance(child, dict) and sum(isinstance(v, dict) for v in child.values()) >= 2:
            inner = next(k for k, v in child.items() if isinstance(v, dict))
            return f"{key}.{inner}"
    raise AssertionError("no nested map")


def test_a_rebuilt_body_whose_written_path_now_holds_a_refused_reference_is_refused() -> None:
    loaded = _stack()
    operator = next(c for c in loaded.components if c.key == "gpu-operator")
    mirrors = _mirrors(*_policies(loaded)[0])
    assert _verdict(loaded, mirrors, [operator]) is None  # its generated maps, kept
    where = _nested_map(operator.values)
    values = copy_maps(operator.values, holders([f"{where}.sidecar"]))  # as a build writes: the rest stays shared
    set_path(values, f"{where}.sidecar", EVIL)
    rebuilt = dataclasses.replace(operator, values=values)
    message = _verdict(loaded, mirrors, [rebuilt])
    assert message is not None and f"gpu-operator spec.forProvider.values.{where}.sidecar: {EVIL}" in message
    _clear()
    assert _verdict(loaded, mirrors, [rebuilt]) == message
    assert _verdict(loaded, mirrors, [operator]) is None


def test_a_component_dropped_and_another_made_in_its_place_is_scanned_as_itself() -> None:
    # New components are made and dropped in turn, so each may take the address
    # (and id) of the last one: a scan kept by id alone would answer for it.
    loaded = _stack()
    base = next(c for c in loaded.components if c.key == "leader-worker-set")
    mirrors = _mirrors(*_policies(loaded)[0])
    for i in range(40):
        component = dataclasses.replace(base, values={"note": EVIL if i % 2 else "nvcr.io/nvidia/x:v1"})
        message = _verdict(loaded, mirrors, [component])
        assert (message is not None) == bool(i % 2), i
        del component
        gc.collect()


def test_a_kept_scan_does_not_keep_its_component_alive() -> None:
    # A dropped plan's components (whose values a document can make megabytes) go with it.
    loaded = _stack()
    base = next(c for c in loaded.components if c.key == "leader-worker-set")
    component = dataclasses.replace(base, values={"blob": "x" * 1_000_000, "image": "nvcr.io/nvidia/x:v1"})
    assert _verdict(loaded, _mirrors(*_policies(loaded)[0]), [component]) is None
    gone = weakref.ref(component)
    del component
    gc.collect()
    assert gone() is None


HOSTS = ["a.io", "A.io", "a.io:5000", "b.example", "localhost"]
PREFIXES = [*HOSTS, "b.example/x", "a.io/p/q"]
REFS = [
    scheme + prefix + tail
    for scheme in ("", "oci://", "https://")
    for prefix in [*PREFIXES, "c.example", "b.examplex"]
    for tail in ("", "/", "x", "/x", "/x/y:v1", "/p/q/r", ":5000/x", "@sha256:00")
]


@pytest.mark.parametrize(
    "allowed",
    [(p,) for p in PREFIXES] + list(itertools.combinations(PREFIXES, 2)) + [tuple(HOSTS)],
)
def test_verdicts_asked_once_per_host_agree_with_the_policies(allowed: tuple[str, ...]) -> None:
    for mirrors in (
        Mirrors(policies=(Policy("p", "here", allowed),)),
        Mirrors(policies=(Policy("p", "here", allowed), Policy("q", "there", tuple(HOSTS)))),
    ):
        verdict = strict._Allowed(mirrors)
        for ref in REFS * 2:  # the second time from what it kept
            assert verdict(ref) == mirrors.allowed(ref), ref
