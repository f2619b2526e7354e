"""``python -m upgrading.refresh [--sources DIR] [--check]``: what Helm installed for Modelplane v0.3.1.

Writes ``facts/v0.3.1-objects.yaml``: for each Release v0.3.1 composed
(``facts/v0.3.1.yaml``), the chart it installed, as its release published it,
and every object Helm renders from that chart with v0.3.1's values, release
name ``mp-<chart>`` and namespace. UPGRADING.md compares them with what Helm
renders from today's charts (:mod:`upgrading.compare`).

A chart version a stack pins today is ``facts/helm/``'s package. Any other
(``source`` in ``facts/v0.3.1.yaml``) is packaged here from its repository at
the tag, as its release script does: ``DIR`` holds git snapshots of the
repositories, one ``<owner>+<name>`` folder each (a git directory, or one with
``repo/`` inside), by default ``../.mirror`` beside the clone. Nothing of those
sources is kept: only the objects' identities, and per chart its repository,
tag, commit, path and the digest of the package built from them. The sources
are read with ``git archive``; the packaging is
:func:`generator.chart_packages.package` (real Helm).
"""

from __future__ import annotations

import hashlib
import io
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any

import click
import yaml

from function.helm import Charts, HelmError, render_release
from generator.chart_inventory import ChartSource, InventoryError, Release
from generator.chart_packages import package
from upgrading.objects import identities, release_body

REPO = Path(__file__).resolve().parents[1]
FACTS = REPO / "facts"
OBJECTS = FACTS / "v0.3.1-objects.yaml"
#: Where the fetched git snapshots of the charts' repositories sit beside a clone.
DEFAULT_SOURCES = REPO.parent / ".mirror"


class RefreshError(Exception):
    pass


def git_dir(sources: Path, repository: str) -> Path:
    """The git directory of ``owner/name`` under ``sources``."""
    folder = sources / repository.replace("/", "+")
    for candidate in (folder / "repo", folder):
        if (candidate / "HEAD").is_file():
            return candidate
    raise RefreshError(f"{repository}: no git snapshot at {folder}")


def _git(gitdir: Path, *args: str) -> bytes:
    done = subprocess.run(["git", f"--git-dir={gitdir}", *args], capture_output=True, check=False)
    if done.returncode != 0:
        raise RefreshError(f"{gitdir}: git {' '.join(args)}: {done.stderr.decode(errors='replace').strip()}")
    return done.stdout


def _export(gitdir: Path, tag: str, path: str, into: Path) -> str:
    """The folder ``path`` at ``tag`` written to ``into``; the tag's commit."""
    commit = _git(gitdir, "rev-parse", f"{tag}^{{commit}}").decode().strip()
    archive = _git(gitdir, "archive", "--format=tar", commit, path)
    prefix = path.rstrip("/") + "/"
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        for member in tar.getmembers():
            if not member.isfile() or not member.name.startswith(prefix):
                continue
            target = into / member.name.removeprefix(prefix)
            target.parent.mkdir(parents=True, exist_ok=True)
            data = tar.extractfile(member)
            assert data is not None  # a regular file
            target.write_bytes(data.read())
    return commit


def _concat(gitdir: Path, commit: str, folder: str, target: Path) -> None:
    """``folder``'s ``*.yaml`` at ``commit`` in name order, joined by ``---`` (cert-manager's hack/concat-yaml.sh)."""
    with tempfile.TemporaryDirectory() as tmp:
        _export(gitdir, commit, folder, Path(tmp))
        parts = [p.read_text() for p in sorted(Path(tmp).glob("*.yaml"))]
    if not parts:
        raise RefreshError(f"{folder} at {commit}: no *.yaml to join into {target.name}")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text("\n---\n".join(p.rstrip("\n") for p in parts) + "\n")


def _stage(comp: dict[str, Any], sources: Path, into: Path) -> dict[str, Any]:
    """The chart's sources at the tag, laid out as its release packages them; their record."""
    source = comp["source"]
    gitdir = git_dir(sources, source["repository"])
    commit = _export(gitdir, source["tag"], source["path"], into)
    record: dict[str, Any] = {k: source[k] for k in ("repository", "tag")} | {"commit": commit, "path": source["path"]}
    for target, folder in (source.get("release", {}).get("concat") or {}).items():
        _concat(gitdir, commit, folder, into / target)
    for target, files in (source.get("release", {}).get("copy") or {}).items():
        # Files from outside the chart folder its release copies in (Grove's prepare-charts.sh: CRDs).
        (into / target).mkdir(parents=True, exist_ok=True)
        for file in files:
            (into / target / Path(file).name).write_bytes(_git(gitdir, "show", f"{commit}:{file}"))
    subcharts: dict[str, Any] = {}
    for name, sub in (source.get("subcharts") or {}).items():
        sub_commit = _export(gitdir, sub["tag"], sub["path"], into / "charts" / name)
        subcharts[name] = {"tag": sub["tag"], "commit": sub_commit, "path": sub["path"]}
    if subcharts:
        record["dependencies"] = subcharts
    return record


def _release(comp: dict[str, Any]) -> Release | None:
    fills = comp["source"].get("release")
    if not fills:
        return None
    seds = tuple((str(pattern), str(replacement)) for pattern, replacement in fills.get("seds") or ())
    return Release(why=fills["by"], chart=fills.get("chart") or {}, fills=fills.get("fills") or {}, seds=seds)


def _releases(recorded: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {k: c for k, c in recorded["components"].items() if c["kind"] == "Release"}


def charts(recorded: dict[str, Any], sources: Path, into: Path) -> dict[str, dict[str, Any]]:
    """The charts of a record's Releases (v0.3.1's, facts/staged-charts.yaml's) packaged into ``into``,
    by archive name, with where each came from."""
    records: dict[str, dict[str, Any]] = {}
    for comp in _releases(recorded).values():
        name = f"{comp['chart']}-{comp['version']}.tgz"
        if "source" not in comp:
            pinned = FACTS / "helm" / name
            if not pinned.is_file():
                raise RefreshError(f"{comp['chart']} {comp['version']}: not in facts/helm/ and no source to package")
            shutil.copy(pinned, into / name)
            records[name] = {"package": f"facts/helm/{name}", "sha256": hashlib.sha256(pinned.read_bytes()).hexdigest()}
            continue
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp) / f"{comp['chart']}-{comp['version']}"
            record = _stage(comp, sources, folder)
            written, data, packaged = package(ChartSource(folder, folder.name), Path(tmp), _release(comp))
        if written != name:
            where = f"{comp['source']['repository']} {comp['source']['tag']}"
            raise RefreshError(f"{where}: packaged as {written}, not {name}")
        (into / name).write_bytes(data)
        # The package's own record adds the fills applied, the subcharts bundled under charts/ and its digest.
        records[name] = record | {k: packaged[k] for k in ("release", "subcharts", "sha256") if k in packaged}
    return records


def generate(sources: Path) -> str:
    v031 = yaml.safe_load((FACTS / "v0.3.1.yaml").read_text())
    with tempfile.TemporaryDirectory() as tmp:
        built = charts(v031, sources, Path(tmp))
        helm = Charts(Path(tmp))
        releases: dict[str, Any] = {}
        for key, comp in _releases(v031).items():
            release, namespace = f"mp-{comp['chart']}", comp["namespace"]
            body = release_body(comp["chart"], comp["version"], release, namespace, comp.get("values") or {})
            objects = identities(render_release(body, helm))
            releases[key] = {
                "chart": f"{comp['chart']}-{comp['version']}.tgz",
                "release": release,
                "namespace": namespace,
                "objects": [o.record() for o in objects],
            }
    header = (
        "# What Helm installed for each Release of Modelplane v0.3.1 (facts/v0.3.1.yaml): the chart as its\n"
        "# release published it (its sources: repository, tag, commit, path; the sha256 of the package built\n"
        "# from them), and every object Helm renders from it with v0.3.1's values, release and namespace\n"
        "# (namespace as the chart writes it; file: the template or crds/ file; hook: helm.sh/hook).\n"
        "# Written by `python -m upgrading.refresh --sources DIR` (upgrading/refresh.py); do not edit.\n"
    )
    lines = [yaml.safe_dump({"charts": built}, sort_keys=False, width=200).rstrip("\n"), "releases:"]
    for key, release in releases.items():
        # One object a line, so that a refresh's diff reads object by object.
        lines += [f"  {key}:", *(f"    {k}: {release[k]}" for k in ("chart", "release", "namespace"))]
        lines.append(f"    objects:  # {len(release['objects'])}")
        lines += [f"    - {_flow(o)}" for o in release["objects"]]
    return header + "\n".join(lines) + "\n"


def _flow(record: dict[str, Any]) -> str:
    return yaml.safe_dump(record, default_flow_style=True, sort_keys=False, width=10_000).strip()


@click.command()
@click.option(
    "--sources",
    type=click.Path(file_okay=False, path_type=Path),
    default=DEFAULT_SOURCES,
    show_default=True,
    help="Git snapshots of the charts' repositories, one <owner>+<name> folder each.",
)
@click.option("--check", is_flag=True, help="Exit 1 when the committed file is not what the sources give.")
def main(sources: Path, check: bool) -> None:
    try:
        text = generate(sources)
    except (RefreshError, HelmError, InventoryError) as error:
        click.echo(f"upgrading.refresh: {error}", err=True)
        sys.exit(1)
    if check:
        if not OBJECTS.is_file() or OBJECTS.read_text() != text:
            click.echo(f"{OBJECTS.name} is out of date: run `python -m upgrading.refresh` and commit it.", err=True)
            sys.exit(1)
        click.echo(f"{OBJECTS.name} is up to date")
        return
    OBJECTS.write_text(text)
    click.echo(f"wrote {OBJECTS.relative_to(REPO)}")


if __name__ == "__main__":
    main()
