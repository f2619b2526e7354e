"""What strict finds in a body the short way equals what walking the whole body finds.

``strict`` walks a component's values (or manifest) apart from the rest of its
body, skips the generated maps a build shares, keeps what the rest of a body
holds by the fields ``component_body`` makes it from, and decides a bare-host
allow-list by first segments. Each test compares one of those with the plain
definition: every string of ``component_body(component)`` (the walk a Fatal
lists from), every token of it, every reference asked of the policies.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from function import stack
from function.bodies import component_body
from function.overrides import strict
from function.overrides.images import REFERENCE, is_host, split_reference
from function.overrides.registry import Mirrors, Policy, bare
from function.stack import ChartRef, Component, Stack

STACKS = stack.every()
COMPONENTS = [(s, c) for s in STACKS for c in s.components]
# Strings a reference may hide in, and strings that only look like one.
TEXTS = st.one_of(
    st.sampled_from(
        [
            "evil.example/x:v1",
            "nvcr.io/nvidia/y",
            "localhost:5000/z:1",
            "LOCALHOST/q",
            "Registry.Example/p/q@sha256:" + "0" * 64,
            "https://charts.example/path",
            "oci://r.example/charts",
            "--image=r.example/i:2 --x=y",
            "v1.2.3",
            "nvidia.com/gpu",
            "plain",
            "",
        ]
    ),
    st.text(alphabet="ab./:-@L", max_size=14),
)
KEYS = st.sampled_from(["image", "repository", "registry", "name", "args", "ImageRef", "x"])


def _full_walk(component: Component) -> tuple[dict[str, str], dict[str, dict[str, str]]]:
    """Every token of every string of the whole body, by whether it counts anywhere, then by host."""
    anywhere: dict[str, str] = {}
    by_host: dict[str, dict[str, str]] = {}
    for _path, key, text in strict._strings(component_body(component), ""):
        for token, host, shaped, written in strict._tokens(key, text):
            if shaped:
                anywhere[token] = written
            else:
                by_host.setdefault(host, {})[token] = written
    return anywhere, by_host


def _sorted(found: strict.Found) -> tuple[dict[str, str], dict[str, dict[str, str]]]:
    """What a body holds, by whether it counts anywhere, then by host, whichever way it is kept."""
    candidates = strict._candidates(list(found))[0] if isinstance(found, tuple) else found
    return candidates.anywhere, candidates.by_host


def _short_way(loaded: Stack, component: Component) -> tuple[dict[str, str], dict[str, dict[str, str]]]:
    return _sorted(strict._candidates_of(component, strict._read_generated(loaded), {}, {}))


def _maps_and_lists(node: Any) -> Iterator[Any]:
    if isinstance(node, dict | list):
        yield node
        for value in node.values() if isinstance(node, dict) else node:
            yield from _maps_and_lists(value)


def _map_paths(node: dict[str, Any], at: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    yield at
    for key, value in node.items():
        if isinstance(value, dict):
            yield from _map_paths(value, (*at, key))


def _written(tree: dict[str, Any], at: tuple[str, ...], key: str, value: Any) -> dict[str, Any]:
    """``tree`` with ``value`` at ``at`` + ``key``, as a build writes: the maps on the way copied, the rest shared."""
    copy = dict(tree)
    if at:
        copy[at[0]] = _written(tree[at[0]], at[1:], key, value)
    else:
        copy[key] = value
    return copy


@st.composite
def _rebuilt(draw: st.DrawFn) -> tuple[Stack, Component]:
    """A generated component with a few writes into its values or manifest: new strings, new maps and lists,
    and generated maps and lists moved under other keys."""
    loaded, component = draw(st.sampled_from(COMPONENTS))
    payload = component.values if component.is_release else component.manifest
    generated = [n for c in loaded.components for n in _maps_and_lists(c.values if c.is_release else c.manifest)]
    value = st.one_of(
        TEXTS,
        st.builds(lambda k, t: {k: t}, KEYS, TEXTS),
        st.builds(lambda k, t, u: [t, {k: u}, [t]], KEYS, TEXTS, TEXTS),
        st.sampled_from(generated) if generated else TEXTS,
    )
    paths = list(_map_paths(payload))
    for _ in range(draw(st.integers(0, 4))):
        payload = _written(payload, draw(st.sampled_from(paths)), draw(KEYS), draw(value))
    if component.is_release:
        return loaded, dataclasses.replace(component, values=payload)
    return loaded, dataclasses.replace(component, manifest=payload)


@settings(max_examples=300, deadline=None)
@given(_rebuilt())
def test_a_rebuilt_body_holds_what_walking_all_of_it_finds(rebuilt: tuple[Stack, Component]) -> None:
    loaded, component = rebuilt
    assert _short_way(loaded, component) == _full_walk(component)


@pytest.mark.parametrize("loaded", STACKS, ids=lambda s: s.id)
def test_every_generated_body_holds_what_walking_all_of_it_finds(loaded: Stack) -> None:
    for component in loaded.components:
        assert _short_way(loaded, component) == _full_walk(component), component.key


MUTATED = "mutated.example/x:v1"


def _mutations(component: Component) -> Iterator[tuple[str, Component]]:
    """``component`` with each field but its kind and payload changed in turn to one holding a reference."""
    for field in dataclasses.fields(Component):
        if field.name in ("kind", "values", "manifest"):
            continue
        value = getattr(component, field.name)
        new: Any
        if isinstance(value, bool):
            new = not value
        elif isinstance(value, str):
            new = f"{value}.{MUTATED}"
        elif isinstance(value, dict):
            new = {**value, "mutated": MUTATED}
        elif isinstance(value, tuple):
            new = (*value, MUTATED) if all(isinstance(v, str) for v in value) else value + value[:1]
        elif value is None or isinstance(value, ChartRef):
            chart = value or ChartRef("c", "oci://c.example/charts", "1.0.0")
            for name in ("name", "repository", "version", "pull_secret_ref"):
                yield (
                    f"chart.{name}",
                    dataclasses.replace(component, chart=dataclasses.replace(chart, **{name: MUTATED})),
                )
            continue
        else:
            raise AssertionError(f"Component.{field.name}: a type this test does not change; add it")
        yield field.name, dataclasses.replace(component, **{field.name: new})


@pytest.mark.parametrize("loaded", STACKS, ids=lambda s: s.id)
def test_what_the_rest_of_a_body_holds_is_kept_by_every_field_it_is_made_from(loaded: Stack) -> None:
    # Each component first as generated (what it holds kept), then with one
    # field changed: a field the kept answer ignored would bring back the old one.
    for generated in loaded.components:
        small = dataclasses.replace(generated, values={"image": "a.example/b:1"}, manifest={"image": "c.example/d"})
        assert _short_way(loaded, small) == _full_walk(small)
        for name, changed in _mutations(small):
            assert _short_way(loaded, changed) == _full_walk(changed), (generated.key, name)


ALLOWED = st.lists(
    st.sampled_from(["evil.example", "Registry.Example", "localhost:5000", "nvcr.io/nvidia", "r.example", "x.b"]),
    max_size=3,
).map(tuple)


HOSTS = st.sets(st.sampled_from(["nvidia.com", "nvcr.io", "x.b", "evil.example", "v1.2.3", "registry.example"]))
DIGESTED = "Registry.Example/p/q@sha256:" + "0" * 64


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(KEYS, TEXTS), max_size=8), ALLOWED, ALLOWED, HOSTS)
# A host written in capitals is decided as written; a path prefix by the whole reference, not its host.
@example([("name", DIGESTED)], ("Registry.Example",), ("Registry.Example",), set())
@example([("name", DIGESTED)], ("registry.example",), ("registry.example",), set())
@example([("image", "nvcr.io/nvidia/y")], ("nvcr.io/nvidia",), ("nvcr.io/nvidia",), set())
@example([("x", "nvcr.io/other/y")], ("nvcr.io/nvidia",), ("r.example",), {"nvcr.io"})
def test_refused_is_every_reference_asked_of_every_policy(
    strings: list[tuple[str, str]], first: tuple[str, ...], second: tuple[str, ...], hosts: set[str]
) -> None:
    held = [held for key, text in strings for held in strict._tokens(key, text)]
    # Either way a body's tokens are kept: as found (few), or sorted by host.
    kept: list[strict.Found] = [tuple(held), strict._candidates(held)[0]]
    for policies in ((Policy("a", "here", first),), (Policy("a", "here", first), Policy("b", "there", second))):
        mirrors = Mirrors(policies=policies)
        expected = any(
            not mirrors.allowed(ref) for key, text in strings for ref in strict._references(key, text, frozenset(hosts))
        )
        for found in kept:
            assert strict._refused(found, frozenset(hosts), strict._Allowed(mirrors)) == expected


# New containers a build may put at many paths of many bodies (a plan's pull-secret lists): lists holding strings
# (their nearest key decides what a string holds) and maps, some holding nothing.
SHARED = st.one_of(
    st.builds(lambda k, t: [{k: t}], KEYS, TEXTS),
    st.builds(lambda t, u: [t, [u]], TEXTS, TEXTS),
    st.builds(lambda k, t: {k: [t]}, KEYS, TEXTS),
    st.just([{"name": "artifactory-pull"}]),
)


@st.composite
def _sharing(draw: st.DrawFn) -> tuple[Stack, list[Component]]:
    """Components of one stack rebuilt with the same few new containers at several paths, under several keys."""
    loaded = draw(st.sampled_from(STACKS))
    pool = draw(st.lists(SHARED, min_size=1, max_size=3))
    rebuilt = []
    for component in draw(st.lists(st.sampled_from(loaded.components), min_size=1, max_size=4)):
        payload = component.values if component.is_release else component.manifest
        paths = list(_map_paths(payload))
        for _ in range(draw(st.integers(1, 6))):
            payload = _written(payload, draw(st.sampled_from(paths)), draw(KEYS), draw(st.sampled_from(pool)))
        if component.is_release:
            rebuilt.append(dataclasses.replace(component, values=payload))
        else:
            rebuilt.append(dataclasses.replace(component, manifest=payload))
    return loaded, rebuilt


@settings(max_examples=300, deadline=None)
@given(_sharing())
def test_containers_one_check_meets_again_hold_what_walking_all_of_them_finds(
    sharing: tuple[Stack, list[Component]],
) -> None:
    loaded, components = sharing
    generated, memo, seen = strict._read_generated(loaded), strict.Memo(), strict.Seen()  # one check's: kept throughout
    for component in components:
        found = strict._candidates_of(component, generated, memo, seen)
        assert _sorted(found) == _full_walk(component), component.key


def test_a_list_one_check_meets_at_many_paths_is_walked_twice(monkeypatch: pytest.MonkeyPatch) -> None:
    loaded = STACKS[0]
    secrets = [{"name": "artifactory-pull"}]  # holds nothing: under any key
    components = [
        dataclasses.replace(c, values={"a": {"imagePullSecrets": secrets}, "b": {"x": {"pullSecrets": secrets}}})
        for c in loaded.components
        if c.is_release
    ][:3]
    walked: list[Any] = []
    real = strict._held_under

    def counting(node: Any, *rest: Any) -> None:
        walked.append(node)
        real(node, *rest)

    monkeypatch.setattr(strict, "_held_under", counting)
    generated, memo, seen = strict._read_generated(loaded), strict.Memo(), strict.Seen()
    for component in components:
        found = strict._candidates_of(component, generated, memo, seen)
        assert _sorted(found) == _full_walk(component), component.key
    assert sum(node is secrets for node in walked) == 2  # six paths: the third and later are taken from the first walks


@given(st.text(alphabet=st.characters(codec="utf-8"), max_size=12) | st.text(alphabet="lOcAhHsStT.:İıΣς", max_size=12))
@example("LocalHost")
@example("xLOCALHOSTy")
def test_a_string_without_h_or_dot_or_colon_cannot_name_localhost(text: str) -> None:
    # What the walk's pretest skips lower() on: the plain definition agrees.
    assert strict._may_hold_a_host(text) == ("." in text or ":" in text or "localhost" in text.lower())


def test_only_h_and_capital_h_lower_to_an_h() -> None:
    # Why the pretest may ask for an "h" before lowering: no other code point lowers to a text holding one
    # (str.lower maps each code point alone, but for a final sigma).
    assert [c for c in map(chr, range(0x110000)) if "h" in c.lower()] == ["H", "h"]


REFS = st.one_of(
    st.text(alphabet="ab.:/@L", max_size=16),
    st.builds(
        "".join,
        st.tuples(
            st.sampled_from(
                ["", "r.example/", "localhost/", "Localhost/", "h:5000/", "docker.io/", "index.docker.io/"]
            ),
            st.sampled_from(["", "a", "a/b", "/", ":", "@", "x://y/", "library/"]),
            st.sampled_from(["", ":v1", "@sha256:" + "0" * 64, ":", "/"]),
        ),
    ),
)


@settings(max_examples=500, deadline=None)
@given(REFS, st.booleans(), ALLOWED)
@example("docker.io/ubuntu", False, ("docker.io",))
@example("r.example/:v1", False, ("r.example",))
def test_an_image_is_allowed_as_its_reference_is(ref: str, prefix: bool, allowed: tuple[str, ...]) -> None:
    # What ``_image_host`` reads of a reference is the host its qualified form starts with, when it reads one.
    host = strict._image_host(ref)
    if ref and not prefix and host is not None:
        assert host == bare(strict._image_ref(ref, prefix)).split("/", 1)[0]
    if ref:
        verdict = strict._Allowed(Mirrors(policies=(Policy("a", "here", allowed),)))
        assert verdict.image(ref, prefix) == verdict(strict._image_ref(ref, prefix))


def _plain_tokens(key: str, text: str) -> tuple[strict.Held, ...]:
    """Every token of ``text`` whose first segment is a host, by the definitions ``_tokens`` inlines."""
    imageish = any(word in key.lower() for word in ("image", "repository", "registry"))
    out = []
    for token in strict._TOKEN.findall(text):
        name = bare(token)
        written = name.split("/", 1)[0]
        if is_host(written.lower()):
            shaped = imageish or bool(REFERENCE.match(name) and "/" in name and split_reference(name)[1])
            out.append((token, written.lower(), shaped and "://" not in token, written))
    return tuple(out)


@settings(max_examples=500, deadline=None)
@given(
    KEYS | st.text(alphabet="imageIMAGEryposRYPOS", max_size=12), TEXTS | st.text(alphabet="ab./:-@L =", max_size=30)
)
@example("ContainerRegistry", "oci://r.example/x/")
def test_tokens_are_the_plain_definition(key: str, text: str) -> None:
    assert strict._tokens(key, text) == _plain_tokens(key, text)
