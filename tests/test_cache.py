"""The one cache: bounded by entries and by bytes, used by every cache of the runtime."""

from __future__ import annotations

import copy
import gc
import re
from typing import Any

from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from function import stack
from function.cache import MIB, BoundedCache, caches
from function.fn import FunctionRunner
from function.model import Accelerator, Cloud
from function.overrides import Collected, plan
from function.overrides.collect import DEFAULT_REQUIREMENT
from function.overrides.document import Document, OverrideDocument
from tests.support.repo import EXAMPLE, REPO, load_docs
from tests.support.requests import fatal, request
from tests.support.xr import make_xr


def test_entries_are_evicted_least_recently_used_first_to_fit_the_byte_bound() -> None:
    cache: BoundedCache[str, str] = BoundedCache("test", max_entries=10, max_bytes=100)
    cache.put("a", "a", 40)
    cache.put("b", "b", 40)
    assert cache.get("a") == "a"  # now b is the oldest
    cache.put("c", "c", 40)
    assert (cache.get("a"), cache.get("b"), cache.get("c")) == ("a", None, "c")
    assert cache.bytes == 80
    cache.put("a", "a2", 10)  # a replaced entry gives its bytes back
    assert cache.bytes == 50 and cache.get("a") == "a2"


def test_a_value_above_the_whole_budget_is_not_kept() -> None:
    cache: BoundedCache[str, str] = BoundedCache("test", max_entries=10, max_bytes=100)
    cache.put("small", "s", 10)
    assert cache.put("huge", "h", 101) == "h"
    assert cache.get("huge") is None and cache.get("small") == "s" and cache.bytes == 10


def test_an_entry_adds_no_object_for_the_collector_to_walk() -> None:
    # A plan computed for new documents puts ~60 entries; whatever an entry
    # holds beside its key and value would survive with it, and the cyclic
    # collector walks every survivor, young and then old.
    cache: BoundedCache[int, list[int]] = BoundedCache("test", max_entries=2000, max_bytes=MIB)
    values = [[n] for n in range(1000)]
    gc.disable()
    try:
        before = len(gc.get_objects())
        for n, value in enumerate(values):
            cache.put(n, value, 10)
        assert len(gc.get_objects()) - before < 10  # not one per entry
    finally:
        gc.enable()
    assert [cache.get(n) for n in range(1000)] == values and cache.bytes == 10_000


def test_entries_are_bounded_too() -> None:
    cache: BoundedCache[int, int] = BoundedCache("test", max_entries=3, max_bytes=10**9)
    for i in range(10):
        cache.put(i, i, 1)
    assert len(cache) == 3 and [cache.get(i) for i in (6, 7, 8, 9)] == [None, 7, 8, 9]


def test_distinct_megabyte_documents_stay_within_every_cache_byte_bound() -> None:
    # Forty distinct 1 MB override documents, each a new plan, new bodies, a new response.
    bank = load_docs(EXAMPLE / "environmentconfigs" / "regulated-bank.yaml")[0]
    runner = FunctionRunner()
    for i in range(40):
        doc = copy.deepcopy(bank)
        doc["data"]["servingStack"]["components"]["envoy-gateway"]["values"]["blob"] = f"{i}-" + "x" * 1_000_000
        rsp = _parse(runner.respond(request(make_xr("EKS"), required={DEFAULT_REQUIREMENT: [doc]})))
        assert fatal(rsp) is None, fatal(rsp)
    for cache in caches():
        assert cache.bytes <= cache.max_bytes, cache.name
        assert len(cache) <= cache.max_entries, cache.name
    # Bound by bytes, well before their entry bounds.
    by_name = {c.name: c for c in caches()}
    assert len(by_name["override documents"]) < 40 and len(by_name["plans"]) < 40


def test_distinct_driver_names_do_not_grow_the_usage_cache_past_its_bounds() -> None:
    pools = load_docs(EXAMPLE / "environmentconfigs" / "gpu-pools.yaml")[0]
    runner = FunctionRunner()
    usages = next(c for c in caches() if c.name == "usages")
    xr = make_xr("Existing")
    xr["metadata"]["name"] = "lab-gpu-1"  # the document matches this cluster by name
    for i in range(60):
        doc = copy.deepcopy(pools)
        for driver in doc["data"]["servingStack"]["drivers"]:
            driver["name"] = f"{driver['name']}-{i}"
        rsp = _parse(runner.respond(request(xr, required={DEFAULT_REQUIREMENT: [doc]})))
        assert fatal(rsp) is None, fatal(rsp)
    assert usages.bytes <= usages.max_bytes and len(usages) <= usages.max_entries
    assert len(usages) > 60  # it did cache them: one Usage pair per pool per request


def test_the_readme_memory_figure_is_every_cache_bound() -> None:
    # Every BoundedCache the runtime makes (module-level, and a runner's own), by name: the README's total.
    _runner = FunctionRunner()  # its responses cache lives as long as it does
    bounds = {c.name: c.max_bytes for c in caches() if c.name != "test"}
    made = sum(p.read_text().count("= BoundedCache(") for p in (REPO / "function").rglob("*.py"))
    assert len(bounds) == made, sorted(bounds)
    stated = re.search(r"(\d+) MiB in all", (REPO / "README.md").read_text())
    assert stated is not None and sum(bounds.values()) == int(stated.group(1)) * MIB


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
        for cache in caches():
            cache.clear()
        assert runner.respond(req) == expected
    explained = _explained(docs)
    for cache in caches():
        cache.clear()
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
