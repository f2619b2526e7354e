"""The pinned charts as their releases publish them: ``facts/helm/<chart>-<version>.tgz``.

The chart sources under ``SHARED/charts`` are what git holds at each pinned
tag; the published chart differs by what the release script fills in
(:data:`generator.chart_inventory.RELEASES`: Chart.yaml's version and
appVersion, a templated values file, a value) and by the subcharts it bundles
under ``charts/``. :func:`packages` applies both and packages the result with
real Helm (helm-python-sdk: its loader applies ``.helmignore`` as ``helm
package`` does), then writes the archive again with fixed times, owners and
gzip header, so that the same sources give the same bytes on every refresh.
Only a chart's dependencies found in the sources are bundled (vendored under
``charts/``, or a sibling ``<name>-<version>`` folder): those the stacks
enable; the others (kube-prometheus-stack's grafana, say) are absent, and
Helm renders a chart without them as a release whose condition is off.

``./dev refresh`` writes them, with ``facts/helm/SOURCES.yaml`` naming each
archive's source folder, the fills applied, the bundled subcharts and its
digest; tests render every composed Release from them with real Helm.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import shutil
import tarfile
import tempfile
from pathlib import Path
from typing import Any

import yaml

from generator.chart_inventory import (
    RELEASES,
    ChartSource,
    InventoryError,
    Release,
    dependency_source,
    folder_version,
)

SOURCES = "SOURCES.yaml"
#: Archive entries get this time (2000-01-01T00:00:00Z) and owner: what a refresh writes must not
#: depend on when, or by whom, the sources were checked out.
_MTIME = 946684800


def _stage(source: ChartSource, charts_dir: Path, into: Path, release: Release | None) -> list[str]:
    """The chart as its release publishes it, written under ``into``; the bundled subcharts' folders."""
    shutil.copytree(source.path, into, ignore=shutil.ignore_patterns("SOURCE"))
    template = into / "Chart.template.yaml"
    if template.is_file():
        # cert-manager keeps Chart.template.yaml in git; its release writes Chart.yaml from it.
        template.rename(into / "Chart.yaml")
    values_template = into / "values.tmpl.yaml"
    if values_template.is_file():
        values_template.rename(into / "values.yaml")
    if release is not None:
        release.apply(into)
    bundled: list[str] = []
    for dep in source.chart_yaml().get("dependencies") or []:
        found = dependency_source(source, dep, charts_dir)
        if found is None:
            continue
        bundled.append(found.folder)
        target = into / "charts" / str(dep["name"])
        if not target.exists():
            _stage(found, charts_dir, target, RELEASES.get(found.folder))
    return bundled


def _normalised(archive: bytes) -> bytes:
    """The archive with every entry's time and owner fixed, entries by name, gzip without a time."""
    out = io.BytesIO()
    with tarfile.open(fileobj=io.BytesIO(archive), mode="r:gz") as src, tarfile.open(fileobj=out, mode="w") as dst:
        # By name: Helm writes subcharts in the order it loaded them, which varies between runs.
        for member in sorted(src.getmembers(), key=lambda m: m.name):
            data = src.extractfile(member) if member.isfile() else None
            member.mtime, member.uid, member.gid, member.uname, member.gname = _MTIME, 0, 0, "", ""
            member.mode = 0o644 if member.isfile() else 0o755
            dst.addfile(member, data)
    return gzip.compress(out.getvalue(), mtime=0)


def package(source: ChartSource, charts_dir: Path, release: Release | None = None) -> tuple[str, bytes, dict[str, Any]]:
    """``(<chart>-<version>.tgz, archive, its SOURCES record)`` of one chart source folder.

    Its release fills are ``release`` (v0.3.1's charts, :mod:`upgrading.refresh`), else :data:`RELEASES`'.
    """
    release = release or RELEASES.get(source.folder)
    import helm_python as helm  # noqa: PLC0415 - real Helm packages; only refresh needs it

    with tempfile.TemporaryDirectory() as tmp:
        name = str(source.chart_yaml().get("name") or source.folder)
        staged = Path(tmp) / "src" / name
        bundled = _stage(source, charts_dir, staged, release)
        try:
            with helm.Chart.load(staged) as chart:
                written = Path(chart.save(Path(tmp)))
                version = chart.version
        except helm.HelmError as error:
            raise InventoryError(f"{source.path}: Helm cannot package it: {error}") from error
        pinned = folder_version(source.path)
        if version != pinned:
            raise InventoryError(
                f"{source.path}: the published chart would say version {version}, the folder {pinned}"
                " (add its release fills to generator/chart_inventory.py RELEASES)"
            )
        data = _normalised(written.read_bytes())
    record: dict[str, Any] = {
        "source": (source.path / "SOURCE").read_text().strip() if (source.path / "SOURCE").is_file() else "",
        "folder": source.folder,
        **({"release": release.record()} if release else {}),
        **({"subcharts": bundled} if bundled else {}),
        "sha256": hashlib.sha256(data).hexdigest(),
    }
    return f"{name}-{version}.tgz", data, record


def packages(charts_dir: Path) -> dict[str, bytes]:
    """Every packaged chart under ``charts_dir`` that is not only another's dependency, plus SOURCES.yaml."""
    if not charts_dir.is_dir():
        raise InventoryError(f"{charts_dir}: no such directory")
    folders = [ChartSource(p, p.name) for p in sorted(charts_dir.iterdir()) if p.is_dir()]
    siblings = {
        found.folder
        for source in folders
        for dep in source.chart_yaml().get("dependencies") or []
        if (found := dependency_source(source, dep, charts_dir)) is not None and found.path.parent == charts_dir
    }
    files: dict[str, bytes] = {}
    records: dict[str, Any] = {}
    for source in folders:
        if source.folder in siblings:
            continue
        name, data, record = package(source, charts_dir)
        files[name] = data
        records[name] = record
    files[SOURCES] = (
        "# Each packaged chart here: its source folder, what its release fills in, the subcharts bundled\n"
        "# and its digest. Written by `./dev refresh` (generator/chart_packages.py); do not edit.\n"
        + yaml.safe_dump(records, sort_keys=True, width=200)
    ).encode()
    return files
