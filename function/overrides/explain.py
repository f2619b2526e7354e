"""``explain``: per component, which field came from the generated stack and which from which document."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from crossplane.function import resource
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from function.bodies import chart_block
from function.model import ServingStack
from function.stack import Component, Stack
from function.tree import whole_numbers

from . import memory
from .apply import plan
from .collect import collect
from .document import Collected

GENERATED = "generated"


@dataclass(frozen=True)
class FieldSource:
    path: str
    value: Any
    source: str  # GENERATED, or the name of the document that set it


@dataclass(frozen=True)
class Explained:
    key: str
    kind: str
    state: str
    origin: str  # where the generated component came from (aicr:<name>, platform, override:<doc>)
    changed_by: tuple[str, ...]
    fields: tuple[FieldSource, ...]


def _walk(node: Any, path: str) -> Iterator[tuple[str, Any]]:
    if isinstance(node, dict) and node:
        for key, value in node.items():
            yield from _walk(value, f"{path}.{key}")
    elif isinstance(node, list) and node:
        for i, item in enumerate(node):
            yield from _walk(item, f"{path}[{i}]")
    else:
        yield path, node


_LAST_SEGMENT = re.compile(r"(\.[^.\[]*|\[\d+\])$")


def _source(path: str, provenance: Mapping[str, str]) -> str:
    # The most specific recorded path at or above this one: a document that
    # set a whole map or list owns everything under it.
    while path:
        if path in provenance:
            return provenance[path]
        shorter = _LAST_SEGMENT.sub("", path)
        if shorter == path:
            break
        path = shorter
    return GENERATED


def _fields(component: Component, state: str, provenance: Mapping[str, str]) -> Iterator[FieldSource]:
    yield FieldSource("state", state, provenance.get("state", GENERATED))
    if component.chart is not None:
        body: dict[str, Any] = {"chart": chart_block(component.chart), "values": component.values}
    else:
        body = {"manifest": component.manifest}
    for top, node in body.items():
        for path, value in _walk(node, top):
            yield FieldSource(path, value, _source(path, provenance))


def explain(stack: Stack, found: Collected) -> tuple[list[Explained], list[str]]:
    """Every planned component's fields with their sources, and the plan's warnings."""
    planned = plan(stack, found)
    out = []
    for p in planned.planned:
        c = p.component
        fields = tuple(_fields(c, p.state, planned.provenance.get(c.key, {})))
        out.append(Explained(c.key, c.kind, p.state, c.origin, p.changed_by, fields))
    return out, [*found.warnings, *planned.warnings]


Fetch = Callable[[fnv1.ResourceSelector], fnv1.Resources]


def found_offline(req: fnv1.RunFunctionRequest, xr: ServingStack, fetch: Fetch) -> Collected:
    """Run the requirements exchange once, offline: ask, fetch with ``fetch``, collect."""
    ask = fnv1.RunFunctionResponse()
    observed = memory.observed_stack(req)
    first = collect(req, ask, xr, observed)
    if first is not None:
        return first
    answered = fnv1.RunFunctionRequest()
    answered.CopyFrom(req)
    for name, selector in ask.requirements.resources.items():
        answered.required_resources[name].CopyFrom(fetch(selector))
    found = collect(answered, fnv1.RunFunctionResponse(), xr, observed)
    assert found is not None, "every requirement was answered"
    return found


def _short(value: Any) -> str:
    value = whole_numbers(value)
    text = json.dumps(value, separators=(",", ":"), sort_keys=True) if not isinstance(value, str) else value
    return text if len(text) <= 80 else text[:77] + "..."


def format_text(
    stack: Stack, found: Collected, explained: Sequence[Explained], notes: Sequence[str], only_changed: bool = False
) -> str:
    names = [f"{d.name} (remembered: absent now)" if d.remembered else d.name for d in found.documents]
    applied = ", ".join(names) if names else "none"
    lines = [
        f"stack {stack.id} (generator {stack.provenance.generator}); EnvironmentConfigs applied, in order: {applied}"
    ]
    for e in explained:
        if only_changed and not e.changed_by:
            continue
        by = f"; changed by {', '.join(e.changed_by)}" if e.changed_by else ""
        lines += ["", f"{e.key}: {e.kind}, {e.state}, from {e.origin}{by}"]
        fields = [f for f in e.fields if not only_changed or f.source != GENERATED]
        width = max((len(f.path) for f in fields), default=0)
        lines += [f"  {f.path.ljust(width)}  {_short(f.value)}  [{f.source}]" for f in fields]
    for note in notes:
        lines += ["", f"warning: {note}"]
    return "\n".join(lines) + "\n"


def as_data(stack: Stack, found: Collected, explained: Sequence[Explained], notes: Sequence[str]) -> dict[str, Any]:
    return {
        "stack": stack.id,
        "environmentConfigs": list(found.applied),
        "remembered": [d.name for d in found.documents if d.remembered],
        "components": [
            {
                "name": e.key,
                "kind": e.kind,
                "state": e.state,
                "source": e.origin,
                "changedBy": list(e.changed_by),
                "fields": [{"path": f.path, "value": whole_numbers(f.value), "from": f.source} for f in e.fields],
            }
            for e in explained
        ],
        "warnings": list(notes),
    }


def request_for(xr: dict[str, Any], input_doc: dict[str, Any] | None) -> fnv1.RunFunctionRequest:
    req = fnv1.RunFunctionRequest()
    req.observed.composite.resource.CopyFrom(resource.dict_to_struct(xr))
    if input_doc is not None:
        req.input.CopyFrom(resource.dict_to_struct(input_doc))
    return req
