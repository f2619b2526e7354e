"""The objects a Release installs, as Helm renders them, and how two sets of them differ on an upgrade.

An object is known by its kind, namespace and name (the namespace as the
chart writes it: Helm puts a namespaced object written without one in the
release's namespace, the same for both sides of a comparison whose release
namespace is the same). Where Helm takes it from decides what an upgrade does
with it (helm v3.17.4 and v4.2.3, the Helm of provider-helm v1.0.2 and main):

* a template (the release's manifest): on upgrade Helm deletes every object of
  the current manifest the new one lacks and creates the new ones
  (``pkg/kube/client.go`` Update: ``original.Difference(target)``), so a rename
  is a delete and a create;
* a chart's ``crds/`` directory: installed on first install only, when absent
  (``pkg/action/install.go``: ``chrt.CRDObjects()``); an upgrade never
  installs, changes or deletes one (``pkg/action/upgrade.go`` has no such step);
* a hook (``helm.sh/hook``): cut out of the manifest
  (``pkg/releaseutil/manifest_sorter.go``), created when its event fires and
  deleted by its delete policy, never by the manifest difference.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from function.bodies import EXTERNAL_NAME
from function.helm import Rendered

TEMPLATE = "template"
CRDS_DIR = "crds/"
HOOK = "hook"


@dataclass(frozen=True, order=True)
class Identity:
    """One object a Release installs: kind, namespace as written ("" for none), name, and where it comes from."""

    kind: str
    namespace: str
    name: str
    file: str  # the chart-relative template or crds/ file
    hook: str = ""  # the helm.sh/hook events, "" when not a hook
    crds_dir: bool = False

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.kind, self.namespace, self.name)

    @property
    def placement(self) -> str:
        return CRDS_DIR if self.crds_dir else HOOK if self.hook else TEMPLATE

    def __str__(self) -> str:
        where = f"{self.namespace}/" if self.namespace else ""
        return f"{self.kind} {where}{self.name}"

    def record(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind}
        if self.namespace:
            out["namespace"] = self.namespace
        out["name"] = self.name
        out["file"] = self.file
        if self.hook:
            out["hook"] = self.hook
        if self.crds_dir:
            out["crdsDir"] = True
        return out

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> Identity:
        return cls(
            kind=str(record["kind"]),
            namespace=str(record.get("namespace", "")),
            name=str(record["name"]),
            file=str(record["file"]),
            hook=str(record.get("hook", "")),
            crds_dir=bool(record.get("crdsDir", False)),
        )


def identity(rendered: Rendered) -> Identity:
    """The identity of one rendered object; its file relative to the chart (the chart's folder name cut off)."""
    kind, namespace, name = rendered.identity
    # function.helm names a crds/ object ``crds/<chart>/...`` and a template ``<chart>/templates/...``.
    crds_dir = rendered.template.startswith(CRDS_DIR)
    path = rendered.template.removeprefix(CRDS_DIR) if crds_dir else rendered.template
    return Identity(kind, namespace, name, path.split("/", 1)[-1], rendered.hook, crds_dir)


def identities(rendered: Iterable[Rendered]) -> list[Identity]:
    return sorted({identity(r) for r in rendered})


def release_body(chart: str, version: str, release: str, namespace: str, values: dict[str, Any]) -> dict[str, Any]:
    """A Release as the function composes one, with only what Helm reads from it (function.helm.render_release)."""
    return {
        "metadata": {"annotations": {EXTERNAL_NAME: release}},
        "spec": {
            "forProvider": {"chart": {"name": chart, "version": version}, "namespace": namespace, "values": values}
        },
    }


@dataclass(frozen=True)
class Difference:
    """What an upgrade from ``old`` to ``new`` objects does, object by object."""

    old: tuple[Identity, ...]
    new: tuple[Identity, ...]
    same: tuple[Identity, ...] = ()
    removed: tuple[Identity, ...] = ()
    added: tuple[Identity, ...] = ()
    renamed: tuple[tuple[Identity, Identity], ...] = ()
    moved: tuple[tuple[Identity, Identity], ...] = ()  # same object, another placement
    # Old objects from files the new chart's package here lacks (the published chart has them): not compared.
    unpackaged: tuple[Identity, ...] = ()

    @property
    def count(self) -> int:
        return len(self.removed) + len(self.added) + len(self.renamed) + len(self.moved)


def _likeness(a: str, b: str) -> tuple[int, int]:
    """How alike two names are: the length of their common suffix, then of their common prefix."""
    suffix = 0
    while suffix < min(len(a), len(b)) and a[-1 - suffix] == b[-1 - suffix]:
        suffix += 1
    prefix = 0
    while prefix < min(len(a), len(b)) and a[prefix] == b[prefix]:
        prefix += 1
    return suffix, prefix


def _pairs(removed: list[Identity], added: list[Identity]) -> list[tuple[Identity, Identity]]:
    """Renames: a removed and an added object of the same kind, namespace, file and placement.

    A group with one of each is a pair; in a larger one, the most alike names
    pair first (``mp-x-webhook`` → ``x-webhook`` before ``mp-x-cainjector``),
    and a name sharing nothing with any other stays unpaired.
    """
    groups: dict[tuple[str, str, str, str], tuple[list[Identity], list[Identity]]] = {}
    for obj in removed:
        groups.setdefault((obj.kind, obj.namespace, obj.file, obj.placement), ([], []))[0].append(obj)
    for obj in added:
        groups.setdefault((obj.kind, obj.namespace, obj.file, obj.placement), ([], []))[1].append(obj)
    pairs: list[tuple[Identity, Identity]] = []
    for olds, news in groups.values():
        if len(olds) == 1 and len(news) == 1:
            pairs.append((olds[0], news[0]))
            continue
        ranked = sorted(
            ((_likeness(o.name, n.name), o, n) for o in olds for n in news),
            key=lambda t: (-t[0][0], -t[0][1], t[1], t[2]),
        )
        taken: set[Identity] = set()
        for score, o, n in ranked:
            if o not in taken and n not in taken and max(score) > 0:
                pairs.append((o, n))
                taken |= {o, n}
    return sorted(pairs)


def compare_objects(old: Iterable[Identity], new: Iterable[Identity], missing: Iterable[str] = ()) -> Difference:
    """Objects kept, removed, added, renamed (only the name differs) and moved (another placement).

    ``missing`` are the chart-relative files the new chart's release has but its package here lacks
    (facts/helm/SOURCES.yaml): an old object from such a file is not compared (``unpackaged``).
    """
    prefixes = tuple(missing)
    olds, news = sorted(set(old)), sorted(set(new))
    unpackaged = [o for o in olds if prefixes and _file(o).startswith(prefixes)]
    olds = [o for o in olds if o not in unpackaged]
    new_by_key = {n.key: n for n in news}
    old_keys = {o.key for o in olds}
    same = [o for o in olds if o.key in new_by_key and new_by_key[o.key].placement == o.placement]
    moved = [(o, new_by_key[o.key]) for o in olds if o.key in new_by_key and new_by_key[o.key].placement != o.placement]
    gone = [o for o in olds if o.key not in new_by_key]
    came = [n for n in news if n.key not in old_keys]
    renamed = _pairs(gone, came)
    paired = {o for o, _ in renamed} | {n for _, n in renamed}
    return Difference(
        old=tuple(olds),
        new=tuple(news),
        same=tuple(same),
        removed=tuple(o for o in gone if o not in paired),
        added=tuple(n for n in came if n not in paired),
        renamed=tuple(renamed),
        moved=tuple(moved),
        unpackaged=tuple(unpackaged),
    )


def _file(obj: Identity) -> str:
    return f"{CRDS_DIR}{obj.file}" if obj.crds_dir else obj.file
