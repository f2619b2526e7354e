"""AICR's YAML as Go's yaml.v3 reads it (RESOLUTION.md §12.2), and the error every AICR module raises.

``./dev refresh`` reads AICR's recipes and renders their manifests through this
loader, so what both languages could read differently is refused, not guessed.
"""

from __future__ import annotations

import re
from typing import Any

import yaml

try:
    from yaml import CSafeLoader as _BaseLoader
except ImportError:  # pragma: no cover - PyYAML built without libyaml
    from yaml import SafeLoader as _BaseLoader  # type: ignore[assignment]


class AicrError(Exception):
    """Any failure to load or resolve AICR recipe data; the message names the file and field."""


class _StrictLoader(_BaseLoader):
    """PyYAML safe loader that refuses what YAML 1.1 and Go's yaml.v3 read differently.

    AICR decodes with yaml.v3; PyYAML implements YAML 1.1. Rather than trust either, plain
    scalars that the two could disagree on are rejected with a "quote it" message (§12.2):
    yes/no/on/off, timestamps, octal-looking and sexagesimal numbers, numbers with ``_``,
    exponent floats. Duplicate mapping keys are rejected too (yaml.v3 refuses them).
    """


def _scalar_error(node: yaml.ScalarNode, what: str) -> yaml.constructor.ConstructorError:
    return yaml.constructor.ConstructorError(
        None, None, f"ambiguous plain scalar {node.value!r} ({what}); quote it", node.start_mark
    )


def _construct_bool(_loader: _StrictLoader, node: yaml.ScalarNode) -> bool:
    if node.value not in ("true", "True", "TRUE", "false", "False", "FALSE"):
        raise _scalar_error(node, "YAML 1.1 boolean, a string in Go")
    return str(node.value).lower() == "true"


def _construct_int(loader: _StrictLoader, node: yaml.ScalarNode) -> int:
    text = node.value.lstrip("+-")
    if ":" in text or "_" in text or (len(text) > 1 and text[0] == "0" and text[1] not in "xXbB"):
        raise _scalar_error(node, "sexagesimal, octal or underscored integer")
    return int(loader.construct_yaml_int(node))


def _construct_float(loader: _StrictLoader, node: yaml.ScalarNode) -> float:
    if ":" in node.value or "_" in node.value or "e" in node.value.lower().replace("inf", ""):
        raise _scalar_error(node, "sexagesimal, underscored or exponent float")
    return float(loader.construct_yaml_float(node))


def _construct_timestamp(_loader: _StrictLoader, node: yaml.ScalarNode) -> Any:
    raise _scalar_error(node, "timestamp")


_GO_NUMBER = re.compile(r"^[-+]?(?:\d[\d_]*(?:\.\d*)?|\.\d+)[eE][-+]?\d+$|^[-+]?0[oO][0-7_]+$")


def _construct_str(loader: _StrictLoader, node: yaml.ScalarNode) -> str:
    if node.style is None and _GO_NUMBER.match(node.value):
        raise _scalar_error(node, "a string in YAML 1.1, a number in Go")
    return str(loader.construct_yaml_str(node))


def _construct_map(loader: _StrictLoader, node: yaml.MappingNode) -> Any:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        if isinstance(key_node, yaml.ScalarNode) and key_node.tag != "tag:yaml.org,2002:merge":
            key = (key_node.tag, key_node.value)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate mapping key {key_node.value!r}", key_node.start_mark
                )
            seen.add(key)
    return loader.construct_yaml_map(node)


for _tag, _fn in {
    "bool": _construct_bool,
    "int": _construct_int,
    "float": _construct_float,
    "timestamp": _construct_timestamp,
    "str": _construct_str,
    "map": _construct_map,
}.items():
    _StrictLoader.add_constructor(f"tag:yaml.org,2002:{_tag}", _fn)  # type: ignore[arg-type]


def load_yaml(text: str, where: str, *, multi: bool = False) -> list[Any]:
    """Parse ``text`` (all documents when ``multi``); ``where`` names the file in errors."""
    try:
        if multi:
            return list(yaml.load_all(text, Loader=_StrictLoader))
        return [yaml.load(text, Loader=_StrictLoader)]  # a SafeLoader subclass
    except yaml.YAMLError as exc:
        raise AicrError(f"{where}: invalid YAML: {exc}") from exc
