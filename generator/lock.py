"""The AICR lock (``facts/aicr/lock.yaml``): what AICR resolves for each stack query.

The generator builds from this lock, never from AICR's recipes, so a clone
without an AICR checkout generates the same stacks. ``./dev refresh`` writes it
(:func:`build`, :func:`text`) by running the resolver (:mod:`generator.aicr`) on an AICR
checkout for every query a stack file names, keeping the components the
catalogue takes; every other component AICR resolved is listed by name, so a
reviewer sees what the platform leaves out.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import Field

from function.strictmodel import StrictModel as Strict
from generator import aicr, aicr_recipes, stackfile
from generator.stackfile import AicrQuery, StackFileError

LOCK_FILE = "lock.yaml"

HEADER = (
    "# AICR lock: the AICR-resolved components per stack query, as the generator takes them.\n"
    "# Written by `./dev refresh` (generator/refresh.py, resolver generator/aicr.py); do not edit.\n"
)


class LockedManifest(Strict):
    path: str  # relative to AICR's recipes/, as the overlay names it
    objects: list[dict[str, Any]]  # the rendered template's documents


class LockedComponent(Strict):
    chart: str
    repository: str
    version: str  # verbatim, a leading "v" kept
    namespace: str
    dependencyRefs: list[str] = Field(default_factory=list)  # noqa: N815
    values: dict[str, Any] = Field(default_factory=dict)  # nulls kept: Helm deletes the chart default
    manifests: list[LockedManifest] = Field(default_factory=list)


class LockedQuery(Strict):
    query: AicrQuery  # as the stack files write it
    appliedOverlays: list[str]  # noqa: N815 - "base" first, in merge order
    components: dict[str, LockedComponent]  # enabled components the catalogue takes
    notTaken: list[str] = Field(default_factory=list)  # noqa: N815 - every other component AICR resolved


class AicrRelease(Strict):
    version: str  # release tag
    commit: str


class Lock(Strict):
    aicr: AicrRelease
    queries: list[LockedQuery]

    def find(self, query: AicrQuery, stack_id: str) -> LockedQuery:
        for entry in self.queries:
            if entry.query == query:
                return entry
        asked = ", ".join(f"{k}={v}" for k, v in query.model_dump().items() if v != "any")
        # A stale lock must not silently feed another query's components into a stack.
        raise StackFileError(f"{stack_id}: the AICR lock has no entry for its query ({asked}): run `./dev refresh`")


def read(facts: Path) -> Lock:
    return stackfile.read(facts / "aicr" / LOCK_FILE, Lock)


def build(data: aicr.RecipeData, release: AicrRelease, queries: list[AicrQuery], taken: set[str]) -> Lock:
    """Resolve every distinct query; keep the enabled components named in ``taken``."""
    entries: list[LockedQuery] = []
    for query in sorted(set(queries), key=lambda q: sorted(q.model_dump().items())):
        recipe = aicr.resolve(data, aicr_recipes.Query(**query.model_dump()))
        components = {
            name: LockedComponent(
                chart=c.chart,
                repository=c.source,
                version=c.version,
                namespace=c.namespace,
                dependencyRefs=c.dependency_refs,
                values=c.values,
                manifests=[LockedManifest(path=m.path, objects=m.objects) for m in c.manifests],
            )
            for name, c in recipe.components.items()
            if name in taken and c.enabled
        }
        entries.append(
            LockedQuery(
                query=query,
                appliedOverlays=recipe.applied_overlays,
                components=components,
                notTaken=sorted(set(recipe.components) - set(components)),
            )
        )
    return Lock(aicr=release, queries=entries)


def _key_sorted(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: _key_sorted(node[k]) for k in sorted(node)}
    if isinstance(node, list):
        return [_key_sorted(v) for v in node]
    return node


def text(lock: Lock) -> str:
    """The lock as YAML: fields in model order (query first), values and manifests key-sorted."""
    data = lock.model_dump()
    for entry in data["queries"]:
        for component in entry["components"].values():
            component["values"] = _key_sorted(component["values"])
            component["manifests"] = _key_sorted(component["manifests"])
    return HEADER + yaml.safe_dump(data, sort_keys=False, width=120)
