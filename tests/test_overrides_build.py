"""Building one component: what is kept across registry settings (a generated component's images as read)
gives, for every setting, what building it afresh gives; a component under layers is read under them."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
from collections.abc import Iterator
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from function import stack
from function.cache import caches
from function.model import Accelerator, Cloud
from function.overrides import Collected, Plan, plan
from function.overrides.build import (
    Acc,
    _credit,
    _pull_secret_paths,
    _under_layers,
    _untouched_by_mirrors,
    built,
    leaves,
    mirrors_key,
    replaced,
)
from function.overrides.document import Document, OverrideDocument
from function.overrides.images import merge_pull_secrets, read_image
from function.overrides.registry import (
    CATCH_ALL,
    Mirrors,
    Policy,
    Rule,
    Rules,
    bare,
    chart_repository,
    rewrite_image_name,
    under,
)
from function.paths import get_path
from function.stack import ChartRef, Component, ImageRef
from function.tree import copy_tree
from function.values import deep_merge


def _eks() -> stack.Stack:
    chosen = stack.load(Cloud.EKS, Accelerator.NVIDIA)
    assert chosen is not None
    return chosen


def _mirrors(to: str, **components: Any) -> Document:
    doc: dict[str, Any] = {"registry": {"images": [{"from": "*", "to": to}], "imagePullSecrets": ["pull"]}}
    if components:
        doc["components"] = components
    return _document(to.replace(".", "-").replace("/", "-"), doc)


def _document(name: str, doc: dict[str, Any]) -> Document:
    digest = hashlib.blake2b(json.dumps(doc, sort_keys=True).encode(), digest_size=16).digest()
    return Document(name, f"EnvironmentConfig {name}: data.servingStack", OverrideDocument.model_validate(doc), digest)


def _plan(chosen: stack.Stack, *documents: Document) -> Plan:
    return plan(chosen, Collected(documents=documents))


def _fresh(chosen: stack.Stack, *documents: Document) -> Plan:
    for cache in caches():
        cache.clear()
    return _plan(chosen, *documents)


def test_a_plan_holds_the_generated_plans_own_object_for_what_no_document_changes() -> None:
    # One object per generated component for every plan to share: a cached
    # plan holds one object less per unchanged component for the collector.
    chosen = _eks()
    own = {p.component.key: p for p in plan(chosen, Collected()).planned}
    mirrored = _fresh(chosen, _mirrors("mirror.example.com/shared"))
    for p in mirrored.planned:
        generated = own[p.component.key]
        assert (p is generated) == (p.component is generated.component and not p.changed_by), p.component.key
    assert 0 < sum(p is own[p.component.key] for p in mirrored.planned) < len(mirrored.planned)


def test_a_component_the_mirrors_write_nothing_into_is_the_generated_one() -> None:
    # No image and no pull-secret path: image rules and pull secrets leave its values as they are, so the
    # plan holds the generated component itself (no copy to encode, walk and keep).
    chosen = _eks()
    untouched = [c for c in chosen.components if c.is_release and not c.images and not _pull_secret_paths(c)]
    assert untouched
    mirrored = {p.component.key: p.component for p in _fresh(chosen, _mirrors("mirror.example.com/none")).planned}
    for comp in untouched:
        assert mirrored[comp.key] is comp, comp.key


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


def test_an_image_reading_what_an_earlier_one_wrote_is_read_after_that_write_from_its_source() -> None:
    # Two images sharing one registry key: rewriting the first writes the
    # mirror there, so the second is read as already mirrored and left alone,
    # exactly as when each image is read as the rewriting reaches it; its
    # source stays what the values said before any rewrite (what `images`
    # lists for a mirroring tool: KAI's images all share global.registry).
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
        new, seen = built(synthetic, shared, acc, [], mirrors, mirrors_key(mirrors), "")
        assert new.values == {
            "global": {"registry": to},
            "a": {"repository": "org/a", "tag": "1"},
            "b": {"repository": "org/b"},
        }
        assert [(s.ref, s.source) for s in seen] == [
            (f"{to}/org/a:1", "quay.io/org/a:1"),
            (f"{to}/org/b", "quay.io/org/b"),  # read after the first image's write: already mirrored
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


# ----------------------------------------------------------------------------- the cheaper rebuild's own mechanisms


def test_replaced_is_dataclasses_replace() -> None:
    # build.replaced copies a Component's or ChartRef's attributes instead of
    # calling __init__: the same object only while neither derives a field.
    for cls in (Component, ChartRef):
        assert not hasattr(cls, "__post_init__"), cls
        assert not any(isinstance(v, functools.cached_property) for v in vars(cls).values()), cls
    for chosen in stack.every():
        for comp in chosen.components:
            changes: dict[str, Any] = {"values": {"x": 1}, "manifest": {"y": [2]}}
            if comp.chart is not None:
                changes["chart"] = replaced(comp.chart, version="9.9.9", pull_secret_ref="secret")
                assert changes["chart"] == dataclasses.replace(comp.chart, version="9.9.9", pull_secret_ref="secret")
            new, expected = replaced(comp, **changes), dataclasses.replace(comp, **changes)
            assert type(new) is Component and vars(new) == vars(expected) and new == expected
            assert new is not comp and comp.values is not changes["values"]  # the original as it was


def _rewrite_reference(rules: Rules, ref: str, host_end: int) -> str | None:
    """What a rewrite is, rule by rule through under(): the target of the longest matching source (the
    catch-all replacing ``ref[:host_end]``); None when none matches or ``ref`` is under a target."""
    if any(under(ref, r.to) for r in rules.rules):
        return None
    rule = next((r for r in rules.rules if r.source == CATCH_ALL or under(ref, r.source)), None)
    if rule is None:
        return None
    if rule.source == CATCH_ALL:
        path = ref[host_end:].partition("/")[2]
        return f"{rule.to.rstrip('/')}/{path}" if path else rule.to.rstrip("/")
    return rule.to.rstrip("/") + ref[len(rule.source.rstrip("/")) :]


SCHEMES = st.sampled_from(["", "oci://", "https://"])


SOURCES = st.one_of(st.just(CATCH_ALL), st.tuples(SCHEMES, SEGMENTS).map("".join))


@given(st.lists(SOURCES, max_size=4), SCHEMES, SEGMENTS)
def test_rewrites_are_the_longest_matching_rules_target(prefixes: list[str], scheme: str, ref: str) -> None:
    # Rules.rewrite strips each rule's target and source once per rule set.
    rules = Rules.of([Rule(p, f"m.example/{p.replace('*', 'star')}", "d") for p in prefixes])
    image = rewrite_image_name(rules, ref)
    assert (image and image.value) == _rewrite_reference(rules, ref, 0)
    repository = (scheme + ref).rstrip("/")
    # A chart repository's catch-all replaces scheme and host; without a scheme, all of it.
    scheme_end = repository.find("://")
    host_end = scheme_end + 3 if scheme_end >= 0 else len(repository)
    chart = rules.rewrite(*chart_repository(scheme + ref))
    assert (chart and chart.value) == _rewrite_reference(rules, repository, host_end)
    for got in (image, chart):
        assert got is None or got.rule in rules.rules


def _leaves_reference(node: Any, path: str) -> Iterator[str]:
    if isinstance(node, dict) and node:
        for key, value in node.items():
            yield from _leaves_reference(value, f"{path}.{key}")
    else:
        yield path


PATCHES = st.recursive(
    st.one_of(st.none(), st.integers(), st.text(max_size=3), st.lists(st.integers(), max_size=2)),
    lambda inner: st.dictionaries(st.sampled_from(["a", "b", "c"]), inner, max_size=3),
    max_leaves=12,
)


@given(st.lists(st.tuples(st.sampled_from(["d1", "d2", "d3"]), st.dictionaries(st.sampled_from("ab"), PATCHES))))
def test_a_layer_sets_credit_is_touching_each_leaf_in_turn(layers: list[tuple[str, dict[str, Any]]]) -> None:
    # _layered credits the layers once per layer set, as one map; _credit
    # puts it on a build's Acc as touching every leaf of every layer would.
    touched = Acc()
    for document, patch in layers:
        assert leaves(patch, "values") == list(_leaves_reference(patch, "values"))
        for path in _leaves_reference(patch, "values"):
            touched.touch(document, path)
    comp = Component(key="c", kind="Release", origin="test", values={"a": {"b": 1}})
    layered = _under_layers(dataclasses.replace(_eks(), components=(comp,)), comp, layers)
    credited = Acc()
    _credit(layered, credited)
    assert list(credited.provenance.items()) == list(touched.provenance.items())  # order too: status lists it
    assert list(credited.changed) == list(touched.changed)


def test_shortcuts_write_into_the_patch_and_leave_the_documents_values_alone() -> None:
    # A values patch copies only the maps its shortcuts write into; the
    # parsed document is shared by every request carrying the same bytes.
    for chosen in stack.every():
        components: dict[str, Any] = {}
        for comp in chosen.components:
            if not comp.is_release or not (comp.replicas or comp.images):
                continue
            values: dict[str, Any] = {"kept": {"a": 1}}
            for path in (*comp.replicas, *(p for i in comp.images for p in (i.ref, i.repository, i.tag) if p)):
                values = deep_merge(values, _at(path, "from-values"))
            over: dict[str, Any] = {"values": values}
            if comp.replicas:
                over["replicas"] = 5
            if comp.images:
                over["image"] = "example.org/team/image:1.0"
            components[comp.key] = over
        document = _document("shortcuts", {"components": components})
        before = {key: copy_tree(over.values) for key, over in document.doc.components.items()}
        got = _fresh(chosen, document)
        assert {key: over.values for key, over in document.doc.components.items()} == before, chosen.id
        for p in got.planned:
            if p.component.key in components:
                assert p.component.values["kept"] == {"a": 1}
                for path in p.component.replicas:
                    assert get_path(p.component.values, path) == 5, (chosen.id, p.component.key, path)


def test_a_manifest_with_a_pull_secret_path_of_any_kind_is_one_mirrors_touch() -> None:
    # Built once for every registry setting, it would never get the pull secrets a document names.
    chosen = stack.load(Cloud.EKS, Accelerator.NVIDIA)
    assert chosen is not None
    untouched = next(c for c in chosen.components if c.key in _untouched_by_mirrors(chosen))
    for kind in ("ref_list", "name_list", "name", "ref"):
        path: dict[str, Any] = {f"pull_secret_{kind}_paths": ("spec.pullSecrets",)}
        with_path = dataclasses.replace(untouched, **path)
        components = tuple(with_path if c is untouched else c for c in chosen.components)
        assert untouched.key not in _untouched_by_mirrors(dataclasses.replace(chosen, components=components)), kind


def test_a_manifest_under_layers_is_rewritten_in_place_and_the_generated_one_left_alone() -> None:
    for chosen in stack.every():
        rewritten = [c for c in chosen.components if not c.is_release and c.key not in _untouched_by_mirrors(chosen)]
        assert rewritten, chosen.id  # (the EnvoyProxy: images a controller runs, pull secrets)
        generated = {c.key: copy_tree(c.manifest) for c in rewritten}
        patched = {c.key: {"manifest": {"metadata": {"labels": {"team": "a", "gone": None}}}} for c in rewritten}
        # Under no layer the generated manifest is copied before writing; under layers it is already the build's own.
        for document in (_mirrors("mirror.example.com/hub"), _mirrors("mirror.example.com/hub", **patched)):
            got = _fresh(chosen, document)
            assert {c.key: c.manifest for c in rewritten} == generated, chosen.id
            seen = [s for s in got.images if s.component in generated and s.source]
            assert seen and all(s.ref and s.ref.startswith("mirror.example.com/hub/") for s in seen), chosen.id
            for p in got.planned:
                if p.component.key in generated:
                    assert p.component.manifest != generated[p.component.key]
                    assert p.component.manifest["metadata"].get("labels", {}).get("team") == (
                        "a" if document.doc.components else None
                    )


def test_builds_are_kept_by_what_they_read_of_the_mirrors() -> None:
    chosen = _eks()
    base = Mirrors(
        images=Rules.of([Rule("*", "m.example/x", "a")]), image_pull_secrets=("p",), image_pull_secrets_by="a"
    )
    variants = [
        dataclasses.replace(base, images=Rules.of([Rule("*", "m.example/y", "a")])),
        dataclasses.replace(base, images=Rules.of([Rule("*", "m.example/x", "b")])),
        dataclasses.replace(base, charts=Rules.of([Rule("*", "oci://m.example/c", "a")])),
        dataclasses.replace(base, image_pull_secrets=("q",)),
        dataclasses.replace(base, image_pull_secrets_by="b"),
        dataclasses.replace(base, chart_pull_secret="c"),
        dataclasses.replace(base, chart_pull_secret="c", chart_pull_secret_by="b"),
    ]
    keys = [mirrors_key(m) for m in (base, *variants)]
    assert len(set(keys)) == len(keys)  # everything a build reads tells builds apart
    # Strict policies are checked on the plan: they do not rebuild anything.
    strict = dataclasses.replace(base, policies=(Policy("a", "here", ("m.example",)),))
    assert mirrors_key(strict) == mirrors_key(base)
    registry: dict[str, Any] = {
        "images": [{"from": "*", "to": "m.example/x"}],
        "charts": [{"from": "*", "to": "oci://m.example/charts"}],
    }
    plain = _document("plain", {"registry": registry})
    policed = _document("plain", {"registry": {**registry, "strict": True, "allowedRegistries": ["m.example"]}})
    first, second = _fresh(chosen, plain), _plan(chosen, policed)
    assert all(a.component is b.component for a, b in zip(first.planned, second.planned, strict=True))
    assert second == _fresh(chosen, policed)


def _merge_reference(existing: Any, names: tuple[str, ...], plain: bool | None) -> list[Any]:
    current = list(existing) if isinstance(existing, list) else []
    if plain is None:
        plain = bool(current) and all(isinstance(e, str) for e in current)
    for name in names:
        if name not in [e if isinstance(e, str) else e.get("name") for e in current if isinstance(e, str | dict)]:
            current.append(name if plain else {"name": name})
    return current


SECRETS = st.lists(st.sampled_from(["a", "b", "c"]), max_size=3).map(tuple)


@given(
    st.one_of(
        st.none(),
        st.just(""),
        st.just({}),
        st.lists(st.one_of(st.sampled_from(["a", "b"]), st.builds(dict, name=st.sampled_from(["a", "c"]))), max_size=3),
    ),
    SECRETS,
    st.sampled_from([None, True, False]),
)
def test_pull_secrets_are_added_once_keeping_what_is_there(
    existing: Any, names: tuple[str, ...], plain: bool | None
) -> None:
    before = copy_tree(existing)
    assert merge_pull_secrets(existing, names, plain) == _merge_reference(existing, names, plain)
    assert existing == before
