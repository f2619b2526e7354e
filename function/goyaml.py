"""YAML written the way ``crossplane render`` writes it.

The CLI encodes each object with apimachinery's JSON serializer in YAML mode,
that is ``sigs.k8s.io/yaml.JSONToYAML`` (v1.6.0 in crossplane/cli ``go.mod``),
which re-reads the JSON with go-yaml v2 (``go.yaml.in/yaml/v2`` v2.4.x) and
marshals it again. So the quoting, key order and number format are go-yaml
v2's (read at tag v2.4.4):

* ``encode.go`` ``stringv``: a string goes out plain unless plain text would
  resolve to another type (``resolve.go``: YAML 1.1 booleans such as ``yes``,
  ``on``, ``y``; ``null``, ``~`` and the empty string; ints in any base;
  floats; timestamps) or is a base-60 float, in which case it is
  double-quoted; a string holding a newline is a literal block. The emitter
  (a port of libyaml, as PyYAML's is) still falls back to single quotes where
  plain text is not allowed (``: ``, a leading ``*``...);
* ``sorter.go``: map keys are sorted by ``keyList.Less`` (non-letters before
  letters, runs of digits compared as numbers);
* ``floatv``: ``strconv.FormatFloat(f, 'g', -1, 64)``; integral JSON numbers
  are read back as ints;
* ``emitterc.go``: two-space indent, sequences not indented under their key,
  lines folded at 80 columns, Unicode written as is.
"""

from __future__ import annotations

import calendar
import functools
import math
import re
from collections.abc import Sequence
from decimal import Decimal
from typing import Any

import yaml
from yaml.emitter import Emitter
from yaml.nodes import MappingNode, Node, ScalarNode
from yaml.representer import SafeRepresenter
from yaml.resolver import BaseResolver
from yaml.serializer import Serializer

__all__ = ["dump", "go_tag", "key_less"]

STR, BOOL, INT, FLOAT, NULL, TIMESTAMP = (
    f"tag:yaml.org,2002:{t}" for t in ("str", "bool", "int", "float", "null", "timestamp")
)

# resolve.go resolveMapList (its "<<" entry is never reached: "<" has no hint)
_WORDS: dict[str, str] = {
    **dict.fromkeys(("y", "Y", "yes", "Yes", "YES", "true", "True", "TRUE", "on", "On", "ON"), BOOL),
    **dict.fromkeys(("n", "N", "no", "No", "NO", "false", "False", "FALSE", "off", "Off", "OFF"), BOOL),
    **dict.fromkeys(("", "~", "null", "Null", "NULL"), NULL),
    **dict.fromkeys((".nan", ".NaN", ".NAN", ".inf", ".Inf", ".INF"), FLOAT),
    **dict.fromkeys(("+.inf", "+.Inf", "+.INF", "-.inf", "-.Inf", "-.INF"), FLOAT),
}
# resolve.go resolveTable: the first character says which checks can apply.
_HINTS = {**dict.fromkeys("+-", "S"), **dict.fromkeys("0123456789", "D"), **dict.fromkeys("yYnNtTfFoO~", "M")}
_HINTS["."] = "."

_BASE60_FLOAT = re.compile(r"^[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+(?:\.[0-9_]*)?$")
_YAML_FLOAT = re.compile(r"^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$")
_DOT_FLOAT = re.compile(r"^\.[0-9]+([eE][-+]?[0-9]+)?$")  # what Go's ParseFloat takes after a leading dot
# strconv.ParseInt/ParseUint with base 0: 0x, 0o, 0b prefixes, a leading 0 for octal.
_GO_INT = re.compile(r"^([+-]?)(0[xX][0-9a-fA-F]+|0[oO][0-7]+|0[bB][01]+|0[0-7]*|[1-9][0-9]*)$")
# The layouts parseTimestamp tries ("2006-1-2T15:4:5.999999999Z07:00", the same
# with "t", "2006-1-2 15:4:5.999999999", "2006-1-2"); Go's 1, 2, 15, 4 and 5
# take one or two digits.
_TIMESTAMP = re.compile(
    r"^(\d{4})-(\d{1,2})-(\d{1,2})"
    r"(?:(?:[Tt](\d{1,2}):(\d{1,2}):(\d{1,2})(?:\.\d+)?(?:Z|[+-]\d{2}:\d{2}))"
    r"|(?: (\d{1,2}):(\d{1,2}):(\d{1,2})(?:\.\d+)?))?$"
)
_INT64 = 1 << 63
_BINARY = re.compile(r"^(-?)0b([+-]?)([01]+)$")
# Decimal digits Python reads at most (sys.int_info.default_max_str_digits); 64 bits take 20.
_UINT64_DIGITS = 20


def _go_int(text: str) -> bool:
    m = _GO_INT.match(text)
    if m is None:
        return False
    digits = m.group(2)
    if digits[:1] != "0" and len(digits) > _UINT64_DIGITS:  # decimal, past 64 bits (and past what int() reads)
        return False
    # Go reads a leading 0 as octal; Python's base 0 reads the rest (0x, 0o, 0b, a lone 0, decimal).
    value = int(digits, 8 if digits[:1] == "0" and digits[1:2].isdigit() else 0)
    if m.group(1) == "-":
        return value <= _INT64
    return value < (1 << 64) if not m.group(1) else value < _INT64


def _timestamp(text: str) -> bool:
    m = _TIMESTAMP.match(text)
    if m is None:
        return False
    year, month, day = (int(g) for g in m.group(1, 2, 3))
    if not (1 <= month <= 12 and 1 <= day <= calendar.monthrange(year or 2000, month)[1]):
        return False
    clock = m.group(4, 5, 6) if m.group(4) is not None else m.group(7, 8, 9)
    if clock[0] is None:
        return True
    hour, minute, second = (int(g) for g in clock)
    return hour < 24 and minute < 60 and second < 60


def go_tag(text: str) -> str:
    """The tag go-yaml v2 resolves plain ``text`` to (``resolve("", text)``)."""
    hint = _HINTS.get(text[0]) if text else "N"
    if hint is None:
        return STR
    if text in _WORDS:
        return _WORDS[text]
    if hint == ".":
        return FLOAT if _DOT_FLOAT.match(text) and _go_float(text) else STR
    if hint in ("D", "S"):
        if _timestamp(text):
            return TIMESTAMP
        plain = text.replace("_", "")
        if _go_int(plain):
            return INT
        if _YAML_FLOAT.match(plain) and _go_float(plain):
            return FLOAT
        if _go_binary(plain):
            return INT
    return STR


def _go_float(text: str) -> bool:
    """Whether Go's ``strconv.ParseFloat(text, 64)`` takes ``text`` (of float syntax): not beyond the largest
    double, which it refuses (``ErrRange``) where Python rounds to infinity alike."""
    return not math.isinf(float(text))


def _go_binary(plain: str) -> bool:
    """resolve.go's last try: ``0b`` then what ``ParseInt``/``ParseUint`` read in base 2 (a sign allowed), or
    ``-0b`` then binary digits ``ParseInt`` reads negated; 64 bits either way."""
    m = _BINARY.match(plain)
    if m is None:
        return False
    negated, sign, digits = m.groups()
    if negated and sign:  # "-0b-1": ParseInt("--1") fails
        return False
    value = int(digits, 2)
    return value <= _INT64 if negated or sign == "-" else value < (_INT64 if sign else 2 * _INT64)


def key_less(a: str, b: str) -> bool:
    """go-yaml v2's ``keyList.Less`` for two string keys."""
    for i, (ca, cb) in enumerate(zip(a, b, strict=False)):
        if ca == cb:
            continue
        al, bl = ca.isalpha(), cb.isalpha()
        if al and bl:
            return ca < cb
        if al or bl:
            return bl
        an = bn = 0
        if ca == "0" or cb == "0":
            j = i - 1
            while j >= 0 and a[j].isdigit():
                if a[j] != "0":
                    an = bn = 1
                    break
                j -= 1
        ai = i
        while ai < len(a) and a[ai].isdigit():
            an = an * 10 + int(a[ai])
            ai += 1
        bi = i
        while bi < len(b) and b[bi].isdigit():
            bn = bn * 10 + int(b[bi])
            bi += 1
        if an != bn:
            return an < bn
        if ai != bi:
            return ai < bi
        return ca < cb
    return len(a) < len(b)


def _compare(a: str, b: str) -> int:
    return -1 if key_less(a, b) else (1 if key_less(b, a) else 0)


_KEY_ORDER = functools.cmp_to_key(_compare)


def _format_float(value: float) -> str:
    """``strconv.FormatFloat(value, 'g', -1, 64)`` as go-yaml writes it."""
    if math.isnan(value):
        return ".nan"
    if math.isinf(value):
        return ".inf" if value > 0 else "-.inf"
    if value == 0:
        return "-0" if math.copysign(1, value) < 0 else "0"
    sign, digits, exponent = Decimal(repr(value)).normalize().as_tuple()
    assert isinstance(exponent, int)
    text = "".join(map(str, digits))
    point = len(text) + exponent  # where the decimal point falls
    exp = point - 1
    if exp < -4 or exp >= 6:  # shortest 'g' switches to %e at these exponents
        mantissa = text[0] + ("." + text[1:] if len(text) > 1 else "")
        out = f"{mantissa}e{'-' if exp < 0 else '+'}{abs(exp):02d}"
    elif point <= 0:
        out = "0." + "0" * -point + text
    elif point >= len(text):
        out = text + "0" * (point - len(text))
    else:
        out = text[:point] + "." + text[point:]
    return ("-" if sign else "") + out


class _Resolver(BaseResolver):
    """Resolve plain scalars as go-yaml v2 does, so the emitter agrees on what may go out plain."""

    def resolve(self, kind: type[Node], value: Any, implicit: tuple[bool, bool]) -> str:
        if kind is ScalarNode and implicit[0]:
            return go_tag(value)
        return super().resolve(kind, value, implicit)  # type: ignore[no-untyped-call, no-any-return]


class _Representer(SafeRepresenter):
    def represent_str(self, data: str) -> ScalarNode:
        style: str | None = None
        if "\n" in data:
            style = "|"
        elif go_tag(data) != STR or _BASE60_FLOAT.match(data):
            style = '"'
        return self.represent_scalar(STR, data, style=style)

    def represent_float(self, data: float) -> ScalarNode:
        return self.represent_scalar(FLOAT, _format_float(data))

    def represent_dict(self, data: Any) -> MappingNode:
        items = sorted(((str(k), v) for k, v in data.items()), key=lambda kv: _KEY_ORDER(kv[0]))
        return self.represent_mapping("tag:yaml.org,2002:map", items)

    def ignore_aliases(self, _data: Any) -> bool:
        return True  # shared sub-objects are written out in full, as JSON round-trips them


_Representer.add_representer(str, _Representer.represent_str)
_Representer.add_representer(float, _Representer.represent_float)
_Representer.add_representer(dict, _Representer.represent_dict)


class _Dumper(Emitter, Serializer, _Representer, _Resolver):
    def __init__(self, stream: Any, **_kwargs: Any) -> None:
        Emitter.__init__(self, stream, allow_unicode=True, width=80, indent=2)
        Serializer.__init__(self)
        _Representer.__init__(self, default_flow_style=False, sort_keys=False)
        _Resolver.__init__(self)


def dump(value: Any) -> str:
    """One value as go-yaml v2 would marshal its JSON form."""
    out: str = yaml.dump(value, Dumper=_Dumper)
    return out


def dump_documents(docs: Sequence[Any]) -> str:
    """Documents each preceded by ``---``, as render prints them."""
    return "".join("---\n" + dump(d) for d in docs)
