"""YAML as the Crossplane CLI writes it (go-yaml v2 behind sigs.k8s.io/yaml), case by case from go-yaml's sources."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from function import goyaml


@pytest.mark.parametrize(
    ("text", "tag"),
    [
        # resolve.go resolveMapList: YAML 1.1 words, including y/n that PyYAML reads as strings
        *((w, goyaml.BOOL) for w in ("y", "Y", "yes", "On", "OFF", "n", "no", "true", "False")),
        *((w, goyaml.NULL) for w in ("", "~", "null", "Null")),
        *((w, goyaml.FLOAT) for w in (".inf", "-.Inf", ".nan", ".5", "1.0", "1e3", "-2.5E-3", "08", "1_000.5")),
        *((w, goyaml.INT) for w in ("0", "-17", "0x1F", "0o17", "017", "0b101", "1_000", "18446744073709551615")),
        *((w, goyaml.TIMESTAMP) for w in ("2024-01-01", "2024-01-01T00:00:00Z", "2001-12-14t21:59:43.1+05:00")),
        ("<<", goyaml.STR),  # in resolveMap, but "<" has no hint in resolveTable
        # plain strings
        *(
            (w, goyaml.STR)
            for w in ("v1.2", "1.2.3", "yesno", "0x", "2024-13-01", "2024-02-30", "1:20", "=", "a b", "ON!", "0b2")
        ),
    ],
)
def test_resolve_as_go_yaml(text: str, tag: str) -> None:
    assert goyaml.go_tag(text) == tag


@pytest.mark.parametrize(
    ("text", "tag"),
    [
        # resolve.go: ParseFloat refuses what is beyond the largest double (ErrRange), not what underflows
        *((w, goyaml.STR) for w in ("1e400", "-1e400", "1_0e400", ".5e400")),
        *((w, goyaml.FLOAT) for w in ("1e-400", "1.7976931348623157e308")),
        # ParseInt/ParseUint take 64 bits only: a decimal past them is a float, up to the largest double
        ("18446744073709551616", goyaml.FLOAT),
        ("1" + "0" * 300, goyaml.FLOAT),
        ("1" + "0" * 5000, goyaml.STR),  # (past what Python's int() reads, too)
        ("0" * 5000 + "1", goyaml.INT),  # octal, leading zeros
        # the 0b / -0b branch: ParseInt/ParseUint of what follows, in base 2 (a sign allowed after 0b), 64 bits
        ("0b" + "1" * 64, goyaml.INT),
        ("0b1" + "0" * 64, goyaml.STR),
        ("-0b1" + "0" * 63, goyaml.INT),
        ("-0b1" + "0" * 62 + "1", goyaml.STR),
        ("0b-101", goyaml.INT),
        ("0b+101", goyaml.INT),
        ("0b+1" + "0" * 63, goyaml.STR),
        ("-0b+1", goyaml.STR),
        ("-0b-1", goyaml.STR),
    ],
)
def test_resolve_at_go_yamls_limits(text: str, tag: str) -> None:
    assert goyaml.go_tag(text) == tag


def test_strings_that_would_read_as_something_else_are_double_quoted() -> None:
    out = goyaml.dump(
        {"a": "yes", "b": "y", "c": "2024-01-01T00:00:00Z", "d": "", "e": "8080", "f": "1:20", "g": "v1.2"}
    )
    assert out == 'a: "yes"\nb: "y"\nc: "2024-01-01T00:00:00Z"\nd: ""\ne: "8080"\nf: "1:20"\ng: v1.2\n'


def test_plain_not_allowed_falls_back_to_single_quotes() -> None:
    assert goyaml.dump({"a": "x: y", "b": "*x", "c": "- x", "d": "trailing "}) == (
        "a: 'x: y'\nb: '*x'\nc: '- x'\nd: 'trailing '\n"
    )


def test_multiline_strings_are_literal_blocks() -> None:
    assert goyaml.dump({"a": "one\ntwo\n", "b": "one\ntwo"}) == "a: |\n  one\n  two\nb: |-\n  one\n  two\n"


def test_key_order_is_go_yamls_keylist() -> None:
    keys = ["b", "a10", "a9", "A", "_x", "1a", "a", "a-b", "ab", "a0", "a00"]
    out = goyaml.dump(dict.fromkeys(keys, 1))
    assert [line.split(":")[0] for line in out.splitlines()] == [
        "_x",
        "1a",
        "A",
        "a",
        "a-b",
        "a0",
        "a00",
        "a9",
        "a10",
        "ab",
        "b",
    ]
    assert goyaml.key_less("a2", "a10") and not goyaml.key_less("a10", "a2")


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (0.5, "0.5"),
        (1e-7, "1e-07"),
        (1234567.5, "1.2345675e+06"),
        (123456.5, "123456.5"),
        (0.0001, "0.0001"),
        (-2.25, "-2.25"),
        (float("inf"), ".inf"),
        (float("-inf"), "-.inf"),
        (float("nan"), ".nan"),
    ],
)
def test_floats_as_strconv_g(value: float, text: str) -> None:
    assert goyaml.dump({"v": value}) == f"v: {text}\n"


def test_layout_and_round_trip() -> None:
    doc: dict[str, Any] = {
        "metadata": {"labels": {"on": "off"}, "ownerReferences": [{"name": "x", "controller": True}]},
        "list": [],
        "map": {},
        "none": None,
        "long": "word " * 30 + "end",
        "unicode": "é",
    }
    out = goyaml.dump(doc)
    assert "  ownerReferences:\n  - controller: true\n    name: x\n" in out  # sequences not indented
    assert "list: []\n" in out and "map: {}\n" in out and "none: null\n" in out
    assert '"on": "off"' in out and "unicode: é\n" in out
    # emitterc.go folds at the first space past column 80 (best_width)
    assert "long: " + "word " * 15 + "word\n  " + "word " * 14 + "end\n" in out
    assert yaml.safe_load(out) == doc
    shared = {"k": 1}
    assert goyaml.dump({"a": shared, "b": shared}) == "a:\n  k: 1\nb:\n  k: 1\n"  # no anchors
