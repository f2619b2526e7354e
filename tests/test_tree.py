"""The fast tree helpers give exactly what the protobuf library's general converters give."""

from __future__ import annotations

from typing import Any

from google.protobuf import json_format, struct_pb2
from hypothesis import example, given
from hypothesis import strategies as st

from function.inputs import plain
from function.paths import get_path, holder, set_path
from function.tree import copy_maps, copy_tree, holders, to_struct

JSON = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-(2**53), 2**53), st.floats(allow_nan=False, allow_infinity=False),
              st.text(max_size=10)),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=6), inner, max_size=4)),
    max_leaves=30,
)  # fmt: skip
TREES = st.dictionaries(st.text(max_size=6), JSON, max_size=5)


@given(TREES)
def test_to_struct_is_parse_dict(tree: dict[str, Any]) -> None:
    expected = json_format.ParseDict(tree, struct_pb2.Struct())
    assert to_struct(tree) == expected
    assert to_struct(tree).SerializeToString(deterministic=True) == expected.SerializeToString(deterministic=True)


def _containers(node: Any) -> list[Any]:
    """Every map and list in ``node``, itself first if it is one."""
    if isinstance(node, dict):
        return [node, *(c for v in node.values() for c in _containers(v))]
    if isinstance(node, list):
        return [node, *(c for v in node for c in _containers(v))]
    return []


def _converts_as_parse_dict(tree: dict[str, Any]) -> None:
    """Converted, ``tree`` is ParseDict's."""
    expected = json_format.ParseDict(tree, struct_pb2.Struct())
    struct = to_struct(tree)
    assert struct == expected
    assert struct.SerializeToString(deterministic=True) == expected.SerializeToString(deterministic=True)


@given(TREES)
def test_plain_is_message_to_dict(tree: dict[str, Any]) -> None:
    struct = json_format.ParseDict(tree, struct_pb2.Struct())
    assert plain(struct, "test") == json_format.MessageToDict(struct, preserving_proto_field_name=True)


@given(TREES)
def test_copy_tree_is_equal_and_shares_no_container(tree: dict[str, Any]) -> None:
    copied = copy_tree(tree)
    assert copied == tree

    def containers(node: Any) -> list[int]:
        if isinstance(node, dict):
            return [id(node), *(i for v in node.values() for i in containers(v))]
        if isinstance(node, list):
            return [id(node), *(i for v in node for i in containers(v))]
        return []

    assert not set(containers(copied)) & set(containers(tree))


PATHS = st.lists(st.lists(st.sampled_from(["a", "b", "c", ""]), min_size=1, max_size=4).map(".".join), max_size=4)
NESTED = st.recursive(JSON, lambda inner: st.dictionaries(st.sampled_from(["a", "b", "c", "", "d"]), inner, max_size=4))


@given(st.dictionaries(st.sampled_from(["a", "b", "c", ""]), NESTED, max_size=4), PATHS, JSON)
def test_writing_along_copied_paths_leaves_the_original_alone(
    tree: dict[str, Any], paths: list[str], value: Any
) -> None:
    before = copy_tree(tree)
    copied = copy_maps(tree, holders(paths))
    expected = copy_tree(tree)
    for path in paths:
        set_path(copied, path, value)
        set_path(expected, path, value)
    assert tree == before  # nothing written reached the original
    assert copied == expected  # and the copy took every write
    assert not paths or copied is not tree


def test_copy_maps_shares_what_is_off_the_paths() -> None:
    tree: dict[str, Any] = {"operator": {"image": {"repository": "x"}, "resources": {"cpu": 1}}, "other": {"k": 1}}
    copied = copy_maps(tree, holders(["operator.image.repository"]))
    assert copied["other"] is tree["other"]
    assert copied["operator"]["resources"] is tree["operator"]["resources"]
    assert copied["operator"]["image"] is not tree["operator"]["image"]


def _set_reference(data: dict[str, Any], path: str, value: Any) -> None:
    # Helm's dot path, written step by step: missing or non-map intermediates become maps.
    node = data
    parts = path.split(".")
    for part in parts[:-1]:
        if not isinstance(node.get(part), dict):
            node[part] = {}
        node = node[part]
    node[parts[-1]] = value


@given(st.dictionaries(st.sampled_from(["a", "b", "c", ""]), NESTED, max_size=4), PATHS, JSON)
@example({"a": 1, "b": {"c": [1], "": None}}, ["a.b", "b.c.d", "b..a", "c.a"], {"k": 1})  # through scalars, lists, None
def test_a_holder_reads_as_get_path_and_writes_as_set_path(tree: dict[str, Any], paths: list[str], value: Any) -> None:
    # Pull secrets read then write each path through one walk (paths.holder).
    for path in paths:
        expected, before = copy_tree(tree), get_path(tree, path)
        node, key = holder(tree, path)
        assert node.get(key) == before
        node[key] = copy_tree(value)  # (each write its own: a shared map would be written through twice)
        _set_reference(expected, path, copy_tree(value))
        assert tree == expected
        again = copy_tree(tree)
        set_path(again, path, [copy_tree(value)])
        _set_reference(expected, path, [copy_tree(value)])
        assert again == expected


@given(TREES, st.data())
def test_a_list_met_again_converts_as_a_walked_one(tree: dict[str, Any], data: st.DataObject) -> None:
    # One list object at several paths of a tree (as a rebuild writes a pull-secret list), in maps, in
    # lists and inside another list met again: merged from its first conversion,
    # the result is still ParseDict's.
    lists = [c for c in _containers(tree) if isinstance(c, list)] + [["pull"], [{"name": "pull"}], []]
    shared = data.draw(st.lists(st.sampled_from(lists), min_size=1, max_size=4))
    outer = [shared[0], {"in": shared[-1]}, shared[0]]  # a list holding a list met again, itself met again
    tree = {**tree, **{f"again{i}": node for i, node in enumerate(shared)}, "outer": outer, "outer again": outer}
    _converts_as_parse_dict(tree)
