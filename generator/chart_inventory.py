"""Chart inventories: what the repository keeps from the pinned Helm chart sources.

:func:`inventories` reads every chart source folder under a directory
(``<chart>-<version>/`` with ``Chart.yaml``, ``values.yaml`` and
``templates/``) and makes one ``<chart>-<version>.yaml`` per folder, which
``./dev refresh`` (:mod:`generator.refresh`) writes to ``facts/charts/``:

- ``chart``, ``version``, ``appVersion``, ``source`` (the folder's ``SOURCE`` line);
- ``values``: the chart's default values, each dependency's defaults nested
  under its alias (or name) with the parent's values for it layered on top, as
  Helm coalesces them;
- ``dependencies``: name, alias, version, condition, and whether its sources
  were found (vendored under ``charts/`` or a sibling folder);
- ``images``: every value path holding a container image, its shape and defaults;
- ``templateValues``: every ``.Values.<path>`` the chart's templates (and its
  found dependencies', prefixed with the alias) reference;

Tests read these files, never the chart sources, so they run on a fresh clone;
a parity test regenerates them where the sources exist.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from function.values import deep_merge

#: ``<chart>-<version>`` folder names; the version is the release the sources were read at.
_FOLDER = re.compile(r"^(?P<chart>.+?)-(?P<version>v?\d+\.\d+\.\d+(?:[-+][0-9A-Za-z.-]+)?)$")


@dataclass(frozen=True)
class Release:
    """What a chart's release script changes over its git sources, and where that script is."""

    why: str  # the script (repository file:lines at the tag) that does it
    chart: dict[str, str] = field(default_factory=dict)  # Chart.yaml fields set (version, appVersion)
    fills: dict[str, str] = field(default_factory=dict)  # placeholder -> value, in the values file
    # sed-style substitutions over the values file's lines (pattern -> replacement), in order.
    seds: tuple[tuple[str, str], ...] = ()
    values: dict[str, Any] = field(default_factory=dict)  # values set over values.yaml
    # What the release adds from outside the chart folder, which the reference sources lack: the
    # packaged chart is without it, and says so in facts/helm/SOURCES.yaml (the chart-relative
    # files, ``missingFiles``, and why). UPGRADING.md does not count their objects as removed.
    missing: str = ""
    missing_files: tuple[str, ...] = ()

    def values_text(self, text: str) -> str:
        """The published values file's text, from the text git holds."""
        for placeholder, value in self.fills.items():
            text = text.replace(placeholder, value)
        for pattern, replacement in self.seds:
            text = re.sub(pattern, replacement, text, flags=re.MULTILINE)
        return text

    def apply(self, chart_dir: Path) -> None:
        """Make the git sources in ``chart_dir`` the published chart (Chart.yaml and values.yaml rewritten)."""
        if self.chart:
            meta = chart_dir / "Chart.yaml"
            data = yaml.safe_load(meta.read_text()) or {}
            meta.write_text(yaml.safe_dump({**data, **self.chart}, sort_keys=False, width=1000))
        if self.fills or self.seds or self.values:
            file = chart_dir / "values.yaml"
            text = self.values_text(file.read_text())
            if self.values:
                merged = deep_merge(yaml.safe_load(text) or {}, self.values)
                text = yaml.safe_dump(merged, sort_keys=False, width=1000)
            file.write_text(text)

    def record(self) -> dict[str, Any]:
        parts = (("chart", self.chart), ("fills", self.fills), ("seds", [list(s) for s in self.seds]))
        missing = (("missing", self.missing), ("missingFiles", list(self.missing_files)))
        return {**{k: v for k, v in (*parts, ("values", self.values), *missing) if v}, "by": self.why}


def _versions(version: str, app_version: str | None = None) -> dict[str, str]:
    return {"version": version, "appVersion": app_version or version}


#: The release-time fills of the pinned charts, by source folder, each read in the chart's own
#: repository at the pinned tag. Charts whose git sources are what is published (kube-prometheus-stack
#: and its subcharts, nvidia-dra-driver-gpu 25.12.0, the AMD folder: its published package) have none.
RELEASES: dict[str, Release] = {
    "cert-manager-v1.17.2": Release(
        why="cert-manager/cert-manager v1.17.2 make/manifests.mk:119-126 (Chart.yaml from Chart.template.yaml by "
        "yq), :89-90 (helm package --version/--app-version $(VERSION), git describe: v1.17.2)",
        chart=_versions("v1.17.2"),
        missing="templates/crds.yaml: the release concatenates deploy/crds/*.yaml (six CRDs, rendered when "
        "crds.enabled) into it (make/manifests.mk:15,107-108); the reference sources hold the chart folder only",
        missing_files=("templates/crds.yaml",),
    ),
    "gateway-helm-v1.8.1": Release(
        why="envoyproxy/gateway v1.8.1 tools/make/helm.mk:50-57 (envsubst of values.tmpl.yaml), :24-27 (helm "
        "package --version/--app-version), .github/workflows/release.yaml:128-129 (IMAGE, TAG, IMAGE_PULL_POLICY)",
        chart=_versions("v1.8.1"),
        fills={"${GatewayImage}": "docker.io/envoyproxy/gateway:v1.8.1", "${GatewayImagePullPolicy}": "IfNotPresent"},
    ),
    "ai-gateway-helm-v0.7.0": Release(
        why="envoyproxy/ai-gateway v0.7.0 Makefile:366-369 (helm package --version/--app-version from the tag), "
        ".github/workflows/release.yaml:20-25",
        chart=_versions("v0.7.0"),
    ),
    "ai-gateway-crds-helm-v0.7.0": Release(
        why="envoyproxy/ai-gateway v0.7.0 Makefile:366-369 (helm package --version/--app-version from the tag)",
        chart=_versions("v0.7.0"),
    ),
    "gpu-operator-v25.10.1": Release(
        why="NVIDIA/gpu-operator: packaged by hand (gh-pages RELEASE.md); the published "
        "gh-pages stable/gpu-operator-v25.10.1.tgz differs from git only in Chart.yaml's version and appVersion",
        chart=_versions("v25.10.1"),
    ),
    "lws-v0.8.0": Release(
        why="kubernetes-sigs/lws v0.8.0 hack/push-chart.sh:37-43 (chart version = the tag), :49 (yq: "
        "image.manager repository, tag, pullPolicy), :51 (helm package --version/--app-version)",
        chart=_versions("v0.8.0"),
        values={
            "image": {
                "manager": {"repository": "registry.k8s.io/lws/lws", "tag": "v0.8.0", "pullPolicy": "IfNotPresent"}
            }
        },
    ),
    "node-feature-discovery-0.18.3": Release(
        why="kubernetes-sigs/node-feature-discovery v0.18.3 hack/prepare-release.sh:97,156 (helm package "
        "--version: the release without its v; appVersion patched before the tag, :136-141)",
        chart=_versions("0.18.3", "v0.18.3"),
    ),
    "grove-charts-v0.1.0-alpha.6": Release(
        why="ai-dynamo/grove v0.1.0-alpha.6 .github/workflows/push-artifacts.yaml:70 (registry "
        "ghcr.io/ai-dynamo/grove), :83-86 (sed over values.yaml; helm package --version/--app-version = the tag)",
        chart=_versions("v0.1.0-alpha.6"),
        seds=(
            ("repository: grove-operator", "repository: ghcr.io/ai-dynamo/grove/grove-operator"),
            ("tag:.*", "tag: v0.1.0-alpha.6"),
            ("value: grove-initc", "value: ghcr.io/ai-dynamo/grove/grove-initc"),
        ),
        missing="crds/: the release copies the five Grove CRDs into it (operator/hack/prepare-charts.sh, "
        "push-artifacts.yaml:78-80); the reference sources hold the chart folder only",
        missing_files=("crds/",),
    ),
    "kai-scheduler-v0.16.8": Release(
        why="kai-scheduler/KAI-Scheduler v0.16.8 .github/workflows/on-release.yaml:12 (DOCKER_REGISTRY), :31, "
        ":65-66 (sed of global.registry; helm package --version/--app-version = the tag)",
        chart=_versions("v0.16.8"),
        fills={"registry/local/kai-scheduler": "ghcr.io/kai-scheduler/kai-scheduler"},
    ),
    "kai-scheduler-v0.13.0": Release(
        why="kai-scheduler/KAI-Scheduler v0.13.0 .github/workflows/on-release.yaml:11,23,37-38 (sed of "
        "global.registry; helm package --version/--app-version = the tag)",
        chart=_versions("v0.13.0"),
        fills={"registry/local/kai-scheduler": "ghcr.io/nvidia/kai-scheduler"},
    ),
}


def folder_version(folder: Path) -> str:
    """The release a ``<chart>-<version>`` source folder was read at."""
    match = _FOLDER.match(folder.name)
    if match is None:
        raise InventoryError(f"{folder}: folder name is not <chart>-<version>")
    return match.group("version")


#: Keys of a map that make it an image: charts split a reference into these.
_IMAGE_PARTS = ("registry", "repository", "image", "name", "tag", "version", "digest", "sha")

#: A string that is a full image reference whatever its key: registry host (a
#: dot or a port), path, and a tag.
_FULL_REFERENCE = re.compile(r"^[a-z0-9-]+(?:\.[a-z0-9-]+)+(?::\d+)?/[a-z0-9._/-]+:[A-Za-z0-9_][A-Za-z0-9._-]*$")

_VALUES_REF = re.compile(r"\$?\.Values((?:\.[A-Za-z_][A-Za-z0-9_]*)+)")


class InventoryError(Exception):
    pass


@dataclass(frozen=True)
class ChartSource:
    """One chart's source folder (a top-level folder or a vendored dependency)."""

    path: Path
    folder: str  # the name release fills are keyed by

    def chart_yaml(self) -> dict[str, Any]:
        for name in ("Chart.yaml", "Chart.template.yaml"):
            if (self.path / name).is_file():
                data = yaml.safe_load((self.path / name).read_text())
                return data if isinstance(data, dict) else {}
        raise InventoryError(f"{self.path}: no Chart.yaml")

    def values(self) -> dict[str, Any]:
        for name in ("values.yaml", "values.tmpl.yaml"):
            file = self.path / name
            if file.is_file():
                release = RELEASES.get(self.folder, Release(why=""))
                data = yaml.safe_load(release.values_text(file.read_text()))
                return deep_merge(data if isinstance(data, dict) else {}, release.values)
        return {}

    def template_values(self) -> set[str]:
        found: set[str] = set()
        templates = self.path / "templates"
        if templates.is_dir():
            for file in sorted(templates.rglob("*")):
                if file.is_file() and file.suffix in (".yaml", ".yml", ".tpl", ".txt", ".json"):
                    found.update(m.group(1)[1:] for m in _VALUES_REF.finditer(file.read_text()))
        return found


def _image_entries(values: Any, prefix: str = "") -> list[dict[str, Any]]:
    """Value paths that hold an image: maps split into parts, or strings under an ``*image`` key."""
    out: list[dict[str, Any]] = []
    if not isinstance(values, dict):
        return out
    for key, value in values.items():
        path = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(value, dict):
            parts = {p: value[p] for p in _IMAGE_PARTS if p in value and not isinstance(value[p], (dict, list))}
            is_image = isinstance(value.get("repository"), str) or (
                str(key).lower().endswith("image") and isinstance(value.get("image") or value.get("name"), str)
            )
            # An image's string parts are the image; only its nested maps may hold more images.
            nested = {k: v for k, v in value.items() if isinstance(v, dict)} if is_image else value
            if is_image:
                out.append({"path": path, "shape": "+".join(sorted(parts)), "default": parts})
            out += _image_entries(nested, path)
        elif isinstance(value, str) and (_names_an_image(str(key), value) or _FULL_REFERENCE.match(value)):
            out.append({"path": path, "shape": "ref", "default": {"ref": value}})
        elif isinstance(value, list):
            # Images inside list items (gpu-operator's kataManager.config.runtimeClasses[].artifacts.url).
            for i, item in enumerate(value):
                out += _image_entries(item, f"{path}[{i}]")
    return out


def _names_an_image(key: str, value: str) -> bool:
    """A string value that is one full image reference, judged by its key.

    ``image``, ``*Image`` and KMM's ``relatedImage*`` env values are images;
    ``imageRegistry``, ``*PullPolicy`` and ``*PullSecret`` name something else.
    """
    lowered = key.lower()
    if "image" not in lowered or lowered.endswith(("pullpolicy", "pullsecret", "pullsecrets", "registry")):
        return False
    return lowered.endswith("image") or any(c in value for c in "/:")


def dependency_source(source: ChartSource, dep: dict[str, Any], charts_dir: Path) -> ChartSource | None:
    """Where a dependency's sources are: vendored under ``charts/``, or a sibling folder at its version."""
    name = str(dep.get("name", ""))
    vendored = source.path / "charts" / name
    if vendored.is_dir():
        return ChartSource(vendored, f"{source.folder}/charts/{name}")
    version = str(dep.get("version", ""))
    sibling = charts_dir / f"{name}-{version}"
    if sibling.is_dir():
        return ChartSource(sibling, sibling.name)
    return None


def _collect(source: ChartSource, charts_dir: Path) -> tuple[dict[str, Any], list[dict[str, Any]], set[str]]:
    """Coalesced values, dependency records and template value paths of a chart and its found dependencies."""
    values = source.values()
    templates = source.template_values()
    deps: list[dict[str, Any]] = []
    for dep in source.chart_yaml().get("dependencies") or []:
        key = str(dep.get("alias") or dep["name"])
        record = {k: str(dep[k]) for k in ("name", "alias", "version", "condition") if dep.get(k) is not None}
        found = dependency_source(source, dep, charts_dir)
        record["sources"] = found.folder if found else "not in the chart sources"
        deps.append(record)
        if found is None:
            continue
        sub_values, sub_deps, sub_templates = _collect(found, charts_dir)
        parent = values.get(key)
        values[key] = deep_merge(sub_values, parent if isinstance(parent, dict) else {})
        deps += [{**d, "parent": key + ("." + d["parent"] if "parent" in d else "")} for d in sub_deps]
        templates |= {f"{key}.{p}" for p in sub_templates}
    return values, deps, templates


def inventory(folder: Path, charts_dir: Path) -> dict[str, Any]:
    match = _FOLDER.match(folder.name)
    if match is None:
        raise InventoryError(f"{folder}: folder name is not <chart>-<version>")
    source = ChartSource(folder, folder.name)
    meta = source.chart_yaml()
    values, deps, templates = _collect(source, charts_dir)
    published = RELEASES.get(folder.name, Release(why=""))
    # The release's appVersion where its script sets one (Grove's git says v0.1.0-dev).
    app_version = published.chart.get("appVersion") or str(meta.get("appVersion", ""))
    if app_version in ("", "v0.0.0", "0.0.0"):
        # A placeholder no recorded release fills: the release's own version.
        app_version = match.group("version")
    origin = (folder / "SOURCE").read_text().strip() if (folder / "SOURCE").is_file() else ""
    release = {"fills": published.fills, "seds": [list(s) for s in published.seds], "values": published.values}
    return {
        "chart": str(meta.get("name") or match.group("chart")),
        "version": match.group("version"),
        "appVersion": app_version,
        "source": origin,
        # What the published chart differs in from its git sources, as recorded above.
        "release": {k: v for k, v in release.items() if v},
        "dependencies": deps,
        "images": _image_entries(values),
        "templateValues": sorted(templates),
        "values": values,
    }


def render(data: dict[str, Any]) -> str:
    header = (
        "# Chart inventory written by `./dev refresh` (generator/chart_inventory.py) from the chart's pinned sources;\n"
        "# do not edit.\n"
    )
    body: str = yaml.safe_dump(data, sort_keys=False, default_flow_style=False, width=120, allow_unicode=True)
    return header + body


def inventories(charts_dir: Path) -> dict[str, str]:
    """Every inventory file's name and text for the chart folders under ``charts_dir``."""
    if not charts_dir.is_dir():
        raise InventoryError(f"{charts_dir}: no such directory")
    files: dict[str, str] = {}
    for folder in sorted(p for p in charts_dir.iterdir() if p.is_dir()):
        files[f"{folder.name}.yaml"] = render(inventory(folder, charts_dir))
    return files
