"""Building one component: what is kept across registry settings (a generated component's images as read)
gives, for every setting, what building it afresh gives; a component under layers is read under them."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from function import stack
from function.cache import caches
from function.model import Accelerator, Cloud
from function.overrides import Collected, Plan, plan
from function.overrides.build import Acc, built, mirrors_key
from function.overrides.document import Document, OverrideDocument
from function.overrides.images import read_image
from function.overrides.registry import CATCH_ALL, Mirrors, Policy, Rule, Rules, bare, under
from function.paths import get_path
from function.stack import ChartRef, Component, ImageRef


def _eks() -> stack.Stack:
    chosen = stack.load(Cloud.EKS, Accelerator.NVIDIA)
    assert chosen is not None
    return chosen


def _mirrors(to: str, **components: Any) -> Document:
    doc = {"registry": {"images": [{"from": "*", "to": to}], "imagePullSecrets": ["pull"]}}
    if components:
        doc["components"] = components
    name = to.replace(".", "-").replace("/", "-")
    digest = hashlib.blake2b(json.dumps(doc, sort_keys=True).encode(), digest_size=16).digest()
    return Document(name, f"EnvironmentConfig {name}: data.servingStack", OverrideDocument.model_validate(doc), digest)


def _plan(chosen: stack.Stack, *documents: Document) -> Plan:
    return plan(chosen, Collected(documents=documents))


def _fresh(chosen: stack.Stack, *documents: Document) -> Plan:
    for cache in caches():
        cache.clear()
    return _plan(chosen, *documents)


def test_one_component_under_two_rule_sets_gets_each_its_own_rewrite() -> None:
    chosen = _eks()
    a, b = _mirrors("mirror-a.example.com/hub"), _mirrors("mirror-b.example.com/hub")
    # Warm: both settings built, in turn, from the same reading of each component.
    first_a, first_b, again_a = _plan(chosen, a), _plan(chosen, b), _plan(chosen, a)
    for got, document, host in ((first_a, a, "mirror-a"), (first_b, b, "mirror-b"), (again_a, a, "mirror-a")):
        assert got == _fresh(chosen, document)
        rewritten = [seen for seen in got.images if seen.source and seen.ref != seen.source]
        assert rewritten and all(seen.ref and seen.ref.startswith(f"{host}.example.com/hub/") for seen in rewritten)
        for p in got.planned:
            credited = {path: doc for path, doc in got.provenance.get(p.component.key, {}).items() if ".image" in path}
            assert set(credited.values()) <= {document.name}, p.component.key


def test_layers_that_change_an_image_path_are_read_again() -> None:
    chosen = _eks()
    comp = next(c for c in chosen.components if c.key == "cert-manager")
    img = comp.images[0]
    generated = read_image(comp.values, img)
    assert img.repository is not None and generated.current is not None and not generated.split[0]  # host/path
    to, at = "mirror.example.com/hub", img.repository

    def rewritten(*documents: Document) -> tuple[str, str | None]:
        got = _plan(chosen, *documents)
        assert got == _fresh(chosen, *documents)
        new = next(p.component for p in got.planned if p.component.key == comp.key)
        seen = next(s for s in got.images if s.component == comp.key and s.where == f"image {img.name}")
        return get_path(new.values, at), seen.source

    suffix = generated.current[1]
    patched = {comp.key: {"values": _at(at, "example.org/team/controller")}}
    other = {comp.key: {"values": _at(at, "example.org/other/controller")}}
    for _ in range(2):  # in either order, and again once kept
        path = generated.qualified.split("/", 1)[1]
        assert rewritten(_mirrors(to)) == (f"{to}/{path}", generated.qualified + suffix)
        assert rewritten(_mirrors(to, **patched)) == (f"{to}/team/controller", f"example.org/team/controller{suffix}")
        assert rewritten(_mirrors(to, **other)) == (f"{to}/other/controller", f"example.org/other/controller{suffix}")


def _at(path: str, value: Any) -> dict[str, Any]:
    out: dict[str, Any] = value
    for part in reversed(path.split(".")):
        out = {part: out}
    return out


def test_an_image_reading_what_an_earlier_one_wrote_is_read_after_that_write() -> None:
    # Two images sharing one registry key: rewriting the first writes the
    # mirror there, so the second is read as already mirrored and left alone,
    # exactly as when each image is read as the rewriting reaches it.
    shared = Component(
        key="shared-registry",
        kind="Release",
        origin="test",
        chart=ChartRef("shared", "https://charts.example.org", "1.0.0"),
        values={
            "global": {"registry": "quay.io"},
            "a": {"repository": "org/a", "tag": "1"},
            "b": {"repository": "org/b"},
        },
        images=(
            ImageRef(name="a", registry="global.registry", repository="a.repository", tag="a.tag"),
            ImageRef(name="b", registry="global.registry", repository="b.repository"),
        ),
    )
    synthetic = dataclasses.replace(_eks(), components=(shared,))
    for to in ("mirror-a.example.com/hub", "mirror-b.example.com/hub"):
        mirrors = Mirrors(images=Rules.of([Rule("*", to, "mirrors")]))
        acc = Acc()
        new, seen = built(synthetic, shared, acc, [], mirrors, mirrors_key(mirrors))
        assert new.values == {
            "global": {"registry": to},
            "a": {"repository": "org/a", "tag": "1"},
            "b": {"repository": "org/b"},
        }
        assert [(s.ref, s.source) for s in seen] == [
            (f"{to}/org/a:1", "quay.io/org/a:1"),
            (f"{to}/org/b", f"{to}/org/b"),  # read after the first image's write: already mirrored
        ]
        assert acc.provenance == {"values.global.registry": "mirrors", "values.a.repository": "mirrors"}
        assert shared.values["global"] == {"registry": "quay.io"}  # the generated values as they were


SEGMENTS = st.lists(st.sampled_from(["a", "a.io", "b", "", "*"]), min_size=1, max_size=3).map("/".join)


@given(st.lists(SEGMENTS, max_size=4), SEGMENTS)
def test_rule_sets_and_policies_match_as_under_does(prefixes: list[str], ref: str) -> None:
    # Rule sets and policies strip their prefixes once per set (a rebuild for
    # new mirrors matches every image); what they decide is under()'s, prefix by prefix.
    rules = Rules.of([Rule(p, p, "d") for p in prefixes])
    assert rules.mirrored(ref) == any(under(ref, p) for p in prefixes)
    first = next((r for r in rules.rules if r.source == CATCH_ALL or under(ref, r.source)), None)
    assert rules.match(ref) == first
    assert Policy("d", "here", tuple(prefixes)).allows(ref) == any(under(bare(ref), p) for p in prefixes)
