"""A composed Release as real Helm installs it: the chart from a directory of packaged charts, rendered.

provider-helm installs a Release by pulling ``spec.forProvider.chart`` and
running Helm's install action with ``spec.forProvider.values`` under the
release name in the ``crossplane.io/external-name`` annotation, in
``spec.forProvider.namespace`` (provider-helm ``pkg/controller/namespaced/release/release.go``).
This module runs the same Helm, offline: the PyPI package ``helm-python-sdk``
embeds Helm v4's Go SDK (``helm_python.helm_sdk_version()``: v4.2.3, the Helm
provider-helm's main branch builds with). It is the optional extra
``compose-serving-stack[helm]`` (and a dev dependency): nothing that serves
or renders the stack imports it.

A chart directory holds charts as their releases publish them, one
``<chart>-<version>.tgz`` each (``facts/helm/`` is the stacks' own, written by
``./dev refresh``); a chart is found by the name and version the Release names.
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache, lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from function.bodies import EXTERNAL_NAME

if TYPE_CHECKING:
    import helm_python

#: The annotation Helm reads hooks from; a ``test`` hook runs only under ``helm test``,
#: never on install or upgrade (helm ``pkg/release/v1/hook.go`` HookTest), so it installs nothing.
HOOK = "helm.sh/hook"
_TEST_HOOKS = frozenset({"test", "test-success", "test-failure"})


class HelmError(Exception):
    """A chart that cannot be found or loaded, or values Helm refuses: the message says which."""


@dataclass(frozen=True)
class Rendered:
    """One object a Release installs: the object, and where Helm took it from."""

    object: dict[str, Any]
    template: str  # the chart-relative template (or crds/ file) it came from
    hook: str  # the helm.sh/hook annotation, "" for an ordinary manifest

    @property
    def identity(self) -> tuple[str, str, str]:
        """(kind, namespace as written, name).

        Helm installs a namespaced object written without a namespace in the release's.
        """
        meta = self.object.get("metadata") or {}
        return (str(self.object.get("kind", "")), str(meta.get("namespace") or ""), str(meta.get("name", "")))


def _helm() -> Any:
    try:
        import helm_python  # noqa: PLC0415 - the optional extra; imported where Helm is asked for
    except ImportError as error:  # pragma: no cover - depends on the install
        raise HelmError(
            "real Helm is not installed: pip install 'compose-serving-stack[helm]' (helm-python-sdk)"
        ) from error
    return helm_python


def helm_version() -> str:
    """The Helm SDK version helm-python-sdk embeds (e.g. v4.2.3)."""
    return str(_helm().helm_sdk_version())


class Charts:
    """A directory of packaged charts (``<chart>-<version>.tgz``), each loaded once."""

    def __init__(self, directory: Path) -> None:
        if not directory.is_dir():
            raise HelmError(f"{directory}: no such chart directory")
        self.directory = directory

    def path(self, name: str, version: str) -> Path:
        path = self.directory / f"{name}-{version}.tgz"
        if not path.is_file():
            raise HelmError(f"chart {name} {version} is not in {self.directory} (no {path.name})")
        return path

    def chart(self, name: str, version: str) -> helm_python.Chart:
        return _load(self.path(name, version))


@cache
def _load(path: Path) -> helm_python.Chart:
    helm = _helm()
    try:
        chart: helm_python.Chart = helm.Chart.load(path)
    except helm.HelmError as error:
        raise HelmError(f"{path.name}: {error}") from error
    return chart


@cache
def _crds(path: Path) -> tuple[Rendered, ...]:
    """The objects of a chart's (and its subcharts') ``crds/``: Helm installs them before the templates."""
    return tuple(
        Rendered(obj, f"crds/{crd['filename']}", "") for crd in _load(path).crds for obj in _documents(crd["data"])
    )


def release_chart(release: dict[str, Any]) -> tuple[str, str]:
    chart = release["spec"]["forProvider"]["chart"]
    return str(chart["name"]), str(chart["version"])


def render_release(release: dict[str, Any], charts: Charts) -> list[Rendered]:
    """Every object Helm installs for a composed Release: CRDs from ``crds/``, then the templates.

    Values are validated against the chart's ``values.schema.json`` (and its
    subcharts') as on install; a refusal raises HelmError with Helm's message.
    """
    helm = _helm()
    name, version = release_chart(release)
    chart = charts.chart(name, version)
    spec = release["spec"]["forProvider"]
    release_name = str(release["metadata"]["annotations"][EXTERNAL_NAME])
    namespace = str(spec.get("namespace") or "default")
    try:
        manifests = chart.render(
            spec.get("values") or {}, name=release_name, namespace=namespace, revision=1, is_install=True
        )
    except helm.HelmError as error:
        raise HelmError(f"{name} {version} (release {release_name}): {error}") from error
    out = list(_crds(charts.path(name, version)))
    for template in sorted(manifests):
        # Helm installs every rendered template but partials (``_*``) and NOTES.txt (helm
        # pkg/action/action.go renderResources; pkg/engine keeps partials out of the output).
        base = template.rsplit("/", 1)[-1]
        if base.startswith("_") or base == "NOTES.txt":
            continue
        for obj in _documents(manifests[template]):
            hook = str(((obj.get("metadata") or {}).get("annotations") or {}).get(HOOK, ""))
            if _TEST_HOOKS.isdisjoint(h.strip() for h in hook.split(",")):
                out.append(Rendered(obj, template, hook))
    return out


# libyaml where PyYAML was built with it: charts' CRDs run to megabytes.
if TYPE_CHECKING:
    _Loader = yaml.SafeLoader
else:
    _Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _ManifestLoader(_Loader):
    """YAML as Kubernetes reads a manifest: a plain ``=`` is a string (PyYAML's YAML 1.1 ``value`` tag is not)."""


_ManifestLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:value"]
    for first, resolvers in _Loader.yaml_implicit_resolvers.items()
}


#: How Helm cuts a rendered template into documents: at ``---`` ending a line's whitespace, with
#: anything after it on the line (``---# comment``) starting the next document (helm
#: pkg/release/v1/util/manifest.go, SplitManifests).
_SEPARATOR = re.compile(r"(?:^|\s*\n)---\s*")


def _documents(text: str) -> Iterator[dict[str, Any]]:
    """The objects of a rendered template, cut into documents as Helm cuts them; empty ones dropped."""
    for part in _SEPARATOR.split(text):
        if part.strip():
            yield from _parsed(part)


@lru_cache(maxsize=4096)
def _parsed(document: str) -> tuple[dict[str, Any], ...]:
    """One document's object, parsed once per text: a CRD template renders the same on every stack.

    The objects are shared between calls: read them, copy before changing one.
    """
    doc = yaml.load(io.StringIO(document), Loader=_ManifestLoader)
    return (doc,) if isinstance(doc, dict) and doc else ()
