"""The one memory budget, shared by every cache of the runtime."""

from __future__ import annotations

import copy
import gc
import re
from collections.abc import Iterator
from typing import Any

import pytest
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from function import cache, main, stack
from function.cache import DEFAULT_BUDGET_MB, MIB, BoundedCache, caches
from function.fn import FunctionRunner
from function.model import Accelerator, Cloud
from function.overrides import Collected, plan
from function.overrides.collect import DEFAULT_REQUIREMENT
from function.overrides.document import Document, OverrideDocument
from tests.support.repo import EXAMPLE, REPO, load_docs
from tests.support.requests import fatal, request
from tests.support.xr import make_xr


@pytest.fixture
def small_budget() -> Iterator[None]:
    """A 1 MiB budget for the test, the default again after it (what the other caches held is evicted)."""
    cache.set_budget(1)
    yield
    cache.set_budget(DEFAULT_BUDGET_MB)


@pytest.mark.usefixtures("small_budget")
def test_entries_are_evicted_least_recently_used_first_across_every_cache() -> None:
    first: BoundedCache[str, str] = BoundedCache("test first")
    second: BoundedCache[str, str] = BoundedCache("test second")
    quarter = MIB // 4
    first.put("a", "a", quarter)
    second.put("b", "b", quarter)
    first.put("c", "c", quarter)
    assert second.get("b") == "b"  # now a is the oldest, in either cache
    second.put("d", "d", quarter)
    second.put("e", "e", quarter)  # the budget is full: the oldest entry of any cache goes
    assert (first.get("a"), second.get("b"), first.get("c"), second.get("d")) == (None, "b", "c", "d")
    assert cache.held() == 4 * quarter == first.bytes + second.bytes
    first.put("c", "c2", 10)  # a replaced entry gives its bytes back
    assert first.bytes == 10 and first.get("c") == "c2"


@pytest.mark.usefixtures("small_budget")
def test_a_value_above_a_quarter_of_the_budget_is_not_kept() -> None:
    kept: BoundedCache[str, str] = BoundedCache("test")
    kept.put("small", "s", 10)
    assert kept.put("huge", "h", MIB // 4 + 1) == "h"
    assert kept.get("huge") is None and kept.get("small") == "s" and kept.bytes == 10


def test_a_smaller_budget_evicts_at_once_and_a_dropped_cache_gives_its_bytes_back() -> None:
    runner = FunctionRunner()
    req = request(make_xr("EKS"))
    told = fnv1.RunFunctionResponse.FromString(runner.respond(req))
    # The XR carrying the status it was told: the request every reconcile sends, which the runner keeps.
    req.observed.composite.resource.get_or_create_struct("status").CopyFrom(told.desired.composite.resource["status"])
    runner.respond(req)
    held = cache.held()
    assert held > 0
    del runner  # its responses cache goes with it
    gc.collect()
    assert cache.held() < held
    try:
        cache.set_budget(0)
        assert cache.held() == 0 and all(len(c) == 0 for c in caches())
    finally:
        cache.set_budget(DEFAULT_BUDGET_MB)


def test_an_entry_adds_no_object_for_the_collector_to_walk() -> None:
    # A plan computed for new documents puts ~60 entries; whatever an entry
    # holds beside its key and value would survive with it, and the cyclic
    # collector walks every survivor, young and then old.
    kept: BoundedCache[int, list[int]] = BoundedCache("test")
    values = [[n] for n in range(1000)]
    gc.disable()
    try:
        before = len(gc.get_objects())
        for n, value in enumerate(values):
            kept.put(n, value, 10)
        assert len(gc.get_objects()) - before < 10  # not one per entry
    finally:
        gc.enable()
    assert [kept.get(n) for n in range(1000)] == values and kept.bytes == 10_000


def test_distinct_megabyte_documents_stay_within_the_budget() -> None:
    # Forty distinct 1 MB override documents, each a new plan, new bodies, a new response.
    bank = load_docs(EXAMPLE / "environmentconfigs" / "regulated-bank.yaml")[0]
    runner = FunctionRunner()
    for i in range(40):
        doc = copy.deepcopy(bank)
        doc["data"]["servingStack"]["components"]["envoy-gateway"]["values"]["blob"] = f"{i}-" + "x" * 1_000_000
        rsp = _parse(runner.respond(request(make_xr("EKS"), required={DEFAULT_REQUIREMENT: [doc]})))
        assert fatal(rsp) is None, fatal(rsp)
        assert cache.held() <= cache.budget()
    assert cache.held() == sum(c.bytes for c in caches())
    by_name = {c.name: c for c in caches()}
    assert len(by_name["override documents"]) < 40 and len(by_name["plans"]) < 40


def test_distinct_driver_names_do_not_grow_the_caches_past_the_budget() -> None:
    pools = load_docs(EXAMPLE / "environmentconfigs" / "gpu-pools.yaml")[0]
    runner = FunctionRunner()
    xr = make_xr("Existing")
    xr["metadata"]["name"] = "lab-gpu-1"  # the document matches this cluster by name
    for i in range(60):
        doc = copy.deepcopy(pools)
        for driver in doc["data"]["servingStack"]["drivers"]:
            driver["name"] = f"{driver['name']}-{i}"
        rsp = _parse(runner.respond(request(xr, required={DEFAULT_REQUIREMENT: [doc]})))
        assert fatal(rsp) is None, fatal(rsp)
        assert cache.held() <= cache.budget()


def test_the_readme_and_the_cli_give_the_budget() -> None:
    readme = (REPO / "README.md").read_text()
    row = re.search(r"\| `--cache-size-mb` \| `CACHE_SIZE_MB` \| (\d+) \|", readme)
    assert row is not None and int(row.group(1)) == DEFAULT_BUDGET_MB
    option = next(p for p in main.cli.params if p.name == "cache_size_mb")
    assert option.default == DEFAULT_BUDGET_MB and option.envvar == "CACHE_SIZE_MB"


def test_no_other_cache_in_the_runtime() -> None:
    # functools.cache only where the key is one of the few generated stacks (see function/cache.py).
    allowed = {
        ("stack.py", "available"),
        ("stack.py", "_loaded"),
        ("stack.py", "every"),
        ("compose.py", "renderer"),
        ("apply.py", "_generated"),
        ("apply.py", "_unchanged"),
        ("build.py", "sizes"),
        ("build.py", "_untouched_by_mirrors"),
        ("build.py", "_unlayered"),
        ("strict.py", "stack_hosts"),
        ("strict.py", "_read_generated"),
        ("status.py", "_head"),
        ("strict.py", "stack_keys"),
        ("added.py", "generated_keys"),  # no argument: once per process, over every generated stack
        # Real Helm, for the offline commands and the tests (never imported by the server): each
        # packaged chart loaded once, its crds/ read once; rendered documents parsed once (lru, bounded).
        ("helm.py", "_load"),
        ("helm.py", "_crds"),
        ("helm.py", "_parsed"),
    }
    found = set()
    for path in (REPO / "function").rglob("*.py"):
        text = path.read_text()
        assert "OrderedDict" not in text or path.name == "cache.py", path
        for match in re.finditer(r"@(?:functools\.)?(?:lru_)?cache\b[^\n]*\ndef (\w+)", text):
            found.add((path.name, match.group(1)))
    assert found <= allowed, found - allowed


def _parse(data: bytes) -> fnv1.RunFunctionResponse:
    rsp: fnv1.RunFunctionResponse = fnv1.RunFunctionResponse.FromString(data)
    return rsp


def test_memoized_work_gives_what_fresh_work_gives() -> None:
    # Plans share built components, strict findings and bodies across documents
    # and clusters; each result must equal the one computed from empty caches.
    docs = {p.stem: load_docs(p)[0] for p in (EXAMPLE / "environmentconfigs").glob("*.yaml")}
    edited = copy.deepcopy(docs["regulated-bank"])
    edited["data"]["servingStack"]["components"]["envoy-gateway"]["replicas"] = 3
    sets = [[docs["regulated-bank"]], [docs["regulated-bank"], docs["prod-hold"]], [edited], [docs["byo-cluster"]]]
    sets += [[docs["gpu-pools"]], [docs["prod-hold"]], []]
    requests = []
    for cloud in ("EKS", "Existing", "GKE"):
        xr = make_xr(cloud)
        xr["metadata"]["name"] = "lab-gpu-1"  # gpu-pools matches it by name
        requests += [request(xr, required={DEFAULT_REQUIREMENT: s}) for s in sets]
    runner = FunctionRunner()
    warm = [runner.respond(r) for r in requests]
    warm_again = [runner.respond(r) for r in reversed(requests)][::-1]
    assert warm == warm_again
    for req, expected in zip(requests, warm, strict=True):
        for held in caches():
            held.clear()
        assert runner.respond(req) == expected
    explained = _explained(docs)
    for held in caches():
        held.clear()
    assert _explained(docs) == explained


def _explained(docs: dict[str, dict[str, Any]]) -> list[Any]:
    # Provenance (which document set which field) is replayed from the component cache.
    out = []
    for cloud in ("EKS", "Existing"):
        loaded = stack.load(Cloud(cloud), Accelerator.NVIDIA)
        assert loaded is not None
        for names in (["regulated-bank"], ["regulated-bank", "prod-hold"], ["byo-cluster"]):
            documents = [_document(docs[n]) for n in names]
            result = plan(loaded, Collected(documents=tuple(documents)))
            out.append((result.provenance, [p.changed_by for p in result.planned], result.warnings))
    return out


def _document(config: dict[str, Any]) -> Document:
    doc = OverrideDocument.model_validate(config["data"]["servingStack"])
    name = config["metadata"]["name"]
    return Document(name, f"EnvironmentConfig {name}: data.servingStack", doc, name.encode())
