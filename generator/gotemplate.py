"""A small Go ``text/template`` renderer for AICR's manifest templates (RESOLUTION.md §8.5).

It implements only what the shipped ``components/*/manifests/*.yaml`` use, plus a few
close relatives: ``{{ pipeline }}``, ``$var := pipeline``, ``if``/``with`` (each with an
optional ``else``), field chains on ``.``/``$var``/``( … )``, string/number/bool/nil
constants, pipelines, trim markers ``{{-``/``-}}`` and the functions ``and``, ``not``,
``eq``, ``ne``, ``index``, ``toYaml``, ``nindent``, ``toString`` and ``default``.
Anything else raises :class:`~generator.aicr_yaml.AicrError` — never a half-rendered template.

Semantics follow Go's ``text/template`` with AICR's function map (``pkg/manifest``):

* ``default DEF VAL`` returns DEF only when VAL is nil or ``""`` (not for ``false``/``0``);
* ``toString`` is ``fmt.Sprintf("%v")`` (nil gives ``<nil>``);
* ``toYaml`` is ``sigs.k8s.io/yaml.Marshal`` minus the final newline;
* ``nindent N S`` prefixes every non-empty line with N spaces and adds a leading newline;
* a map key that is absent yields "no value" (printed ``<no value>``), while a field access
  *through* an explicit null inside one chain is an error, as in Go.
"""

from __future__ import annotations

import functools
import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import yaml

from generator.aicr_yaml import AicrError

__all__ = ["MISSING", "GoStruct", "render", "to_yaml"]


class _Missing:
    """Go's invalid ``reflect.Value``: the result of reading an absent map key."""

    _instance: _Missing | None = None

    def __new__(cls) -> _Missing:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "<no value>"

    def __bool__(self) -> bool:
        return False


MISSING: Any = _Missing()
_NO_FINAL: Any = object()  # marks "no piped value" for a command


class GoStruct(dict[str, Any]):
    """A Go struct (e.g. the template's root data): reading an unknown field is an error."""


# ----------------------------------------------------------------------------- parsing


@dataclass
class _Operand:
    kind: str  # field | var | dot | const | func | pipe
    value: Any = None  # const value, var name, func name or sub-pipeline
    chain: tuple[str, ...] = ()  # field names read after the term


@dataclass
class _Pipe:
    decl: str | None
    cmds: list[list[_Operand]]


@dataclass
class _Text:
    text: str


@dataclass
class _Action:
    pipe: _Pipe


@dataclass
class _Branch:
    keyword: str  # if | with
    pipe: _Pipe
    then: list[_Node]
    otherwise: list[_Node] = field(default_factory=list)


_Node = _Text | _Action | _Branch

_FUNCS = frozenset({"and", "not", "eq", "ne", "index", "toYaml", "nindent", "toString", "default"})
_KEYWORDS = frozenset({"if", "with", "else", "end", "range", "define", "template", "block", "break", "continue"})
_SPACE = " \t\r\n"

_TOKEN = re.compile(
    r"""
    (?P<ws>\s+)
    |(?P<decl>:=)
    |(?P<lparen>\()
    |(?P<rparen>\))
    |(?P<pipe>\|)
    |(?P<str>"(?:[^"\\\n]|\\.)*")
    |(?P<raw>`[^`]*`)
    |(?P<num>[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?(?![\w.]))
    |(?P<var>\$[A-Za-z_0-9]*)
    |(?P<field>(?:\.[A-Za-z_][A-Za-z_0-9]*)+)
    |(?P<dot>\.)
    |(?P<ident>[A-Za-z_][A-Za-z_0-9]*)
    """,
    re.VERBOSE,
)


@dataclass
class _Tok:
    kind: str
    text: str
    spaced: bool  # whitespace before it (a field chain must touch its term)


class _Parser:
    def __init__(self, source: str, name: str) -> None:
        self.name = name
        self.items = self._split(source)
        self.pos = 0
        self.scope: list[str] = []

    def fail(self, what: str) -> AicrError:
        return AicrError(f"unsupported template construct {what} in {self.name}")

    # Split the source into text and action items, applying the trim markers.
    def _split(self, src: str) -> list[tuple[str, str]]:
        items: list[tuple[str, str]] = []
        i = 0
        while (j := src.find("{{", i)) >= 0:
            text, k = src[i:j], j + 2
            if src[k : k + 1] == "-" and src[k + 1 : k + 2] in tuple(_SPACE):
                text, k = text.rstrip(_SPACE), k + 1  # "{{- " trims the whitespace before it
            items.append(("text", text))
            end = self._close(src, k)
            action, trim_right = src[k:end], False
            if action.endswith("-") and action[-2:-1] in tuple(_SPACE):
                action, trim_right = action[:-1], True  # " -}}" trims the whitespace after it
            items.append(("action", action))
            i = end + 2
            if trim_right:
                while i < len(src) and src[i] in _SPACE:
                    i += 1
        items.append(("text", src[i:]))
        return items

    def _close(self, src: str, k: int) -> int:
        quote = ""
        while k < len(src):
            c = src[k]
            if quote:
                if c == "\\" and quote == '"':
                    k += 1
                elif c == quote:
                    quote = ""
            elif c in "\"`'":
                quote = c
            elif src.startswith("}}", k):
                return k
            k += 1
        raise AicrError(f"unclosed action in {self.name}")

    def parse(self) -> list[_Node]:
        nodes, stop = self._list()
        if stop != "eof":
            raise AicrError(f"unexpected {{{{{stop}}}}} in {self.name}")
        return nodes

    def _list(self) -> tuple[list[_Node], str]:
        nodes: list[_Node] = []
        while self.pos < len(self.items):
            kind, text = self.items[self.pos]
            self.pos += 1
            if kind == "text":
                if text:
                    nodes.append(_Text(text))
                continue
            if text.lstrip().startswith("/*"):
                raise self.fail("{{/* comment */}}")
            toks = self._lex(text)
            head = toks[0].text if toks and toks[0].kind == "ident" else ""
            if head in ("end", "else"):
                if len(toks) > 1:
                    raise self.fail(f"{{{{{text.strip()}}}}}")
                return nodes, head
            if head in ("if", "with"):
                nodes.append(self._branch(head, toks[1:]))
            elif head in _KEYWORDS:
                raise self.fail(f"{{{{{head}}}}}")
            else:
                nodes.append(_Action(self._pipe(toks, allow_decl=True)))
        return nodes, "eof"

    def _branch(self, keyword: str, toks: list[_Tok]) -> _Branch:
        mark = len(self.scope)  # variables declared in the control structure end with it
        pipe = self._pipe(toks, allow_decl=True)
        inner = len(self.scope)
        then, stop = self._list()
        del self.scope[inner:]
        otherwise: list[_Node] = []
        if stop == "else":
            otherwise, stop = self._list()
        if stop != "end":
            raise AicrError(f"{{{{{keyword}}}}} without {{{{end}}}} in {self.name}")
        del self.scope[mark:]
        return _Branch(keyword, pipe, then, otherwise)

    def _lex(self, text: str) -> list[_Tok]:
        toks: list[_Tok] = []
        pos, spaced = 0, True
        while pos < len(text):
            m = _TOKEN.match(text, pos)
            if m is None or m.lastgroup is None:
                raise self.fail(f"{text[pos:].strip()!r}")
            pos = m.end()
            if m.lastgroup == "ws":
                spaced = True
                continue
            toks.append(_Tok(m.lastgroup, m.group(), spaced))
            spaced = False
        return toks

    def _pipe(self, toks: list[_Tok], allow_decl: bool) -> _Pipe:
        decl = None
        if len(toks) >= 2 and toks[0].kind == "var" and toks[1].kind == "decl":
            if not allow_decl or toks[0].text == "$":
                raise self.fail(f"declaration of {toks[0].text}")
            decl, toks = toks[0].text, toks[2:]
        cmds: list[list[_Operand]] = [[]]
        i = 0
        while i < len(toks):
            tok = toks[i]
            if tok.kind == "pipe":
                cmds.append([])
                i += 1
                continue
            operand, i = self._operand(toks, i)
            cmds[-1].append(operand)
        if any(not cmd for cmd in cmds):
            raise AicrError(f"empty command in pipeline in {self.name}")
        for cmd in cmds:
            if cmd[0].kind != "func" and len(cmd) > 1:
                raise AicrError(f"can't give argument to non-function in {self.name}")
            if any(op.kind == "func" for op in cmd[1:]):
                raise self.fail("function used as an argument")
        if decl is not None:
            self.scope.append(decl)  # visible only after its own pipeline, as in Go
        return _Pipe(decl, cmds)

    def _operand(self, toks: list[_Tok], i: int) -> tuple[_Operand, int]:
        tok = toks[i]
        i += 1
        op: _Operand
        if tok.kind == "field":
            op = _Operand("field", chain=tuple(tok.text[1:].split(".")))
        elif tok.kind == "dot":
            op = _Operand("dot")
        elif tok.kind == "var":
            if tok.text != "$" and tok.text not in self.scope:
                raise AicrError(f"undefined variable {tok.text} in {self.name}")
            op = _Operand("var", tok.text)
        elif tok.kind == "str":
            op = _Operand("const", self._string(tok.text))
        elif tok.kind == "raw":
            op = _Operand("const", tok.text[1:-1])
        elif tok.kind == "num":
            op = _Operand("const", float(tok.text) if re.search(r"[.eE]", tok.text) else int(tok.text))
        elif tok.kind == "ident":
            consts = {"true": True, "false": False, "nil": None}
            if tok.text in consts:
                op = _Operand("const", consts[tok.text])
            elif tok.text in _FUNCS:
                op = _Operand("func", tok.text)
            else:
                raise self.fail(f"{tok.text!r}")
        elif tok.kind == "lparen":
            depth, j = 1, i
            while j < len(toks) and depth:
                depth += {"lparen": 1, "rparen": -1}.get(toks[j].kind, 0)
                j += 1
            if depth:
                raise AicrError(f"unclosed left paren in {self.name}")
            op, i = _Operand("pipe", self._pipe(toks[i : j - 1], allow_decl=False)), j
        else:
            raise self.fail(f"{tok.text!r}")
        # A field chain glued to the term: $x.a.b, (pipeline).a
        while i < len(toks) and toks[i].kind == "field" and not toks[i].spaced:
            if op.kind in ("const", "func"):
                raise self.fail(f"field access on {tok.text}")
            op.chain += tuple(toks[i].text[1:].split("."))
            i += 1
        return op, i

    def _string(self, text: str) -> str:
        try:
            value = json.loads(text)  # Go and JSON agree on \" \\ \n \t \uXXXX
        except json.JSONDecodeError as exc:
            raise self.fail(f"string escape in {text}") from exc
        assert isinstance(value, str)
        return value


# ----------------------------------------------------------------------------- execution


class _Exec:
    def __init__(self, root: Any, name: str) -> None:
        self.root = root
        self.name = name
        self.vars: list[tuple[str, Any]] = [("$", root)]
        self.out: list[str] = []

    def err(self, msg: str) -> AicrError:
        return AicrError(f"template {self.name}: {msg}")

    def walk(self, nodes: list[_Node], dot: Any) -> None:
        for node in nodes:
            if isinstance(node, _Text):
                self.out.append(node.text)
            elif isinstance(node, _Action):
                value = self.pipe(node.pipe, dot)
                if node.pipe.decl is None:
                    self.out.append(_print(value))
            else:
                mark = len(self.vars)
                value = self.pipe(node.pipe, dot)
                if _truth(value):
                    self.walk(node.then, value if node.keyword == "with" else dot)
                else:
                    self.walk(node.otherwise, dot)
                del self.vars[mark:]

    def pipe(self, pipe: _Pipe, dot: Any) -> Any:
        value = _NO_FINAL
        for cmd in pipe.cmds:
            value = self.command(cmd, dot, value)
            if value is None:
                value = MISSING  # Go unwraps a nil interface to "no value" after each command
        if pipe.decl is not None:
            self.vars.append((pipe.decl, value))
        return value

    def command(self, cmd: list[_Operand], dot: Any, final: Any) -> Any:
        head = cmd[0]
        if head.kind == "func":
            thunks: list[Callable[[], Any]] = [functools.partial(self.operand, op, dot) for op in cmd[1:]]
            if final is not _NO_FINAL:
                thunks.append(lambda: final)
            return self.call(str(head.value), thunks)
        if final is not _NO_FINAL:
            raise self.err("can't give argument to non-function")
        return self.operand(head, dot)

    def operand(self, op: _Operand, dot: Any) -> Any:
        if op.kind in ("field", "dot"):
            base = dot
        elif op.kind == "var":
            base = next(v for n, v in reversed(self.vars) if n == op.value)
        elif op.kind == "pipe":
            base = self.pipe(op.value, dot)
        else:
            return op.value
        return self.fields(base, op.chain)

    def fields(self, value: Any, chain: tuple[str, ...]) -> Any:
        for name in chain:
            if value is MISSING:
                return MISSING  # Go: a field of "no value" is "no value"
            if value is None:
                raise self.err(f"nil pointer evaluating interface {{}}.{name}")
            if isinstance(value, GoStruct):
                if name not in value:
                    raise self.err(f"can't evaluate field {name} in type struct")
                value = value[name]
            elif isinstance(value, dict):
                value = value.get(name, MISSING)
            else:
                raise self.err(f"can't evaluate field {name} in type {_go_type(value)}")
        return value

    def call(self, name: str, thunks: list[Callable[[], Any]]) -> Any:
        if name == "and":  # short-circuits, returns the first falsy argument or the last one
            if not thunks:
                raise self.err("wrong number of args for and")
            value = None
            for thunk in thunks:
                value = thunk()
                if not _truth(value):
                    return value
            return value
        args = [thunk() for thunk in thunks]
        arity = {"not": 1, "ne": 2, "toYaml": 1, "nindent": 2, "toString": 1, "default": 2}
        if (name in arity and len(args) != arity[name]) or (name in ("eq", "index") and not args):
            raise self.err(f"wrong number of args for {name}: got {len(args)}")
        if name == "not":
            return not _truth(args[0])
        if name in ("eq", "ne"):
            if len(args) < 2:
                raise self.err("missing argument for comparison")
            equal = any(self.equal(args[0], other) for other in args[1:])
            return equal if name == "eq" else not equal
        if name == "index":
            return self.index(args[0], args[1:])
        args = [None if a is MISSING else a for a in args]  # an `any` parameter receives nil
        if name == "toString":
            return _sprint(args[0])
        if name == "default":
            return args[0] if args[1] is None or args[1] == "" else args[1]
        if name == "toYaml":
            return to_yaml(args[0])
        indent, text = args
        if not isinstance(indent, int) or isinstance(indent, bool) or not isinstance(text, str):
            raise self.err(f"wrong argument types for nindent: {_go_type(indent)}, {_go_type(text)}")
        pad = " " * indent
        return "\n" + "\n".join(pad + line if line else line for line in text.split("\n"))

    def equal(self, a: Any, b: Any) -> bool:
        ka, kb = _kind(a), _kind(b)
        if ka != kb:
            if "nil" in (ka, kb):
                return False
            raise self.err(f"incompatible types for comparison: {_go_type(a)} and {_go_type(b)}")
        if ka == "other":
            raise self.err(f"non-comparable type {_go_type(a)}")
        return ka == "nil" or bool(a == b)

    def index(self, item: Any, keys: list[Any]) -> Any:
        for key in keys:
            if item is None or item is MISSING:
                raise self.err("index of untyped nil")
            if isinstance(item, dict) and not isinstance(item, GoStruct):
                if not isinstance(key, str):
                    raise self.err(f"value has type {_go_type(key)}; should be string")
                item = item.get(key)  # absent key: the zero value, nil
            elif isinstance(item, list | str) and isinstance(key, int) and not isinstance(key, bool):
                if not 0 <= key < len(item):
                    raise self.err(f"index out of range: {key}")
                item = item[key]
            else:
                raise self.err(f"can't index item of type {_go_type(item)}")
        return item


def render(source: str, data: Any, name: str = "template") -> str:
    """Render ``source`` (Go template text) with ``data`` as dot; ``name`` goes into errors."""
    nodes = _Parser(source, name).parse()
    run = _Exec(data, name)
    run.walk(nodes, data)
    return "".join(run.out)


# ----------------------------------------------------------------------------- values


def _truth(value: Any) -> bool:
    if value is None or value is MISSING:
        return False
    if isinstance(value, bool | int | float | str | list | dict):
        return bool(value)
    return True


def _kind(value: Any) -> str:
    if value is None or value is MISSING:
        return "nil"
    for kind, types in (("bool", bool), ("int", int), ("float", float), ("string", str)):
        if isinstance(value, types):
            return kind
    return "other"


def _go_type(value: Any) -> str:
    if isinstance(value, GoStruct):
        return "struct"
    names = {bool: "bool", int: "int", float: "float64", str: "string", list: "[]interface {}"}
    if isinstance(value, dict):
        return "map[string]interface {}"
    return names.get(type(value), "<nil>" if value is None or value is MISSING else type(value).__name__)


def _print(value: Any) -> str:
    """What ``{{ value }}`` writes."""
    return "<no value>" if value is None or value is MISSING else _sprint(value)


def _sprint(value: Any) -> str:
    """``fmt.Sprintf("%v", value)`` for the types YAML decoding produces."""
    if value is None or value is MISSING:
        return "<nil>"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return _go_float(value)
    if isinstance(value, str):
        return value
    if isinstance(value, GoStruct):
        return "{" + " ".join(_sprint(v) for v in value.values()) + "}"
    if isinstance(value, dict):
        return "map[" + " ".join(f"{k}:{_sprint(value[k])}" for k in sorted(value, key=str)) + "]"
    if isinstance(value, list):
        return "[" + " ".join(_sprint(v) for v in value) + "]"
    return str(value)


def _go_float(value: float) -> str:
    """Go's ``%v`` for float64 (strconv 'g', shortest): exponent form below 1e-4 or from 1e6 up."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value == 0:
        return "-0" if str(value).startswith("-") else "0"
    sign, digits_t, exp = Decimal(repr(value)).normalize().as_tuple()
    assert isinstance(exp, int)
    digits = "".join(map(str, digits_t))
    point = len(digits) + exp  # position of the decimal point in digits
    out = "-" if sign else ""
    if point - 1 < -4 or point - 1 >= 6:
        mantissa = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
        e = point - 1
        return f"{out}{mantissa}e{'-' if e < 0 else '+'}{abs(e):02d}"
    if point <= 0:
        return f"{out}0.{'0' * -point}{digits}"
    if point >= len(digits):
        return out + digits + "0" * (point - len(digits))
    return f"{out}{digits[:point]}.{digits[point:]}"


# Plain scalars that YAML 1.1 (PyYAML) and Go's yaml read differently, or that the strict
# loader in generator.aicr refuses (RESOLUTION.md §12.2): always quote such strings.
_AMBIGUOUS_STR = re.compile(r"^[-+]?(?:\d[\d_]*(?:\.\d*)?|\.\d+)[eE][-+]?\d+$|^[-+]?0o[0-7_]+$|^[-+]?0\d+$")


class _Dumper(yaml.SafeDumper):
    pass


def _represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "'" if _AMBIGUOUS_STR.match(value) else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _represent_str)


def _jsonish(value: Any) -> Any:
    """sigs.k8s.io/yaml goes through JSON: map keys become strings, integral floats integers."""
    if isinstance(value, dict):
        return {_sprint(k) if not isinstance(k, str) else k: _jsonish(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_jsonish(v) for v in value]
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e21:
        return int(value)
    return value


def to_yaml(value: Any) -> str:
    """``toYaml``: block-style YAML with sorted keys and the trailing newline removed."""
    text = yaml.dump(
        _jsonish(value), Dumper=_Dumper, default_flow_style=False, sort_keys=True, allow_unicode=True, width=1 << 30
    )
    text = text.removesuffix("...\n")  # PyYAML's document end after a bare scalar
    return text.removesuffix("\n")
