"""``python -m generator.refresh [SHARED_DIR]``: rewrite ``facts/`` from the sources outside the repository.

The only code that reads outside the repository (besides the parity tests). It
writes, from a shared reference directory (``../shared`` by default) or an AICR
checkout given with ``--recipes``:

* ``facts/aicr/lock.yaml`` — the AICR lock (:mod:`generator.lock`), resolved
  for every stack file's query from the recipes and their ``VERSION.md``;
* ``facts/manifests/`` — every external manifest the catalogue ships
  (``manifestFile``), copied byte for byte;
* ``facts/crds/`` — the CRDs the tests validate against, copied byte for byte;
* ``facts/charts/`` — the chart inventories (:mod:`generator.chart_inventory`)
  of every chart source folder under ``SHARED/charts``;
* ``facts/helm/`` — those charts as their releases publish them, packaged by
  real Helm (:mod:`generator.chart_packages`), for the tests that install every
  composed Release with Helm;

the copied folders with a ``SOURCES.yaml`` naming where every file came from. Files
in those folders that no source produces any more are removed. ``./dev
refresh`` runs it, then the generator.
"""

from __future__ import annotations

import hashlib
import re
import sys
from pathlib import Path

import click
import yaml

from generator import aicr, chart_inventory, chart_packages, lock
from generator.aicr_yaml import AicrError
from generator.build import FACTS_DIR, MANIFESTS, STACKS_DIR
from generator.stackfile import CATALOGUE, Catalogue, StackFile, StackFileError, read, stack_paths

DEFAULT_SHARED = FACTS_DIR.parent.parent / "shared"
SOURCES = "SOURCES.yaml"
# The folders of facts/ this command writes; a file there that no source produces is removed.
OWNED = ("aicr", MANIFESTS, "crds", "charts", "helm")


def aicr_release(recipes: Path, version: str | None, commit: str | None) -> lock.AicrRelease:
    """Release tag and commit of an AICR checkout: as given, else from the VERSION.md beside ``recipes/``."""
    if version is None or commit is None:
        version_file = recipes.parent / "VERSION.md"
        if not version_file.is_file():
            raise StackFileError(
                f"{version_file}: missing; pass --aicr-version and --aicr-commit for this AICR checkout"
            )
        text = version_file.read_text()
        tag = re.search(r"^\| release tag \| `([^`]+)`", text, re.MULTILINE)
        sha = re.search(r"^\| commit \| `([0-9a-f]{40})`", text, re.MULTILINE)
        if not tag or not sha:
            raise StackFileError(f"{version_file}: no release tag / commit rows")
        version, commit = version or tag.group(1), commit or sha.group(1)
    return lock.AicrRelease(version=version, commit=commit)


def _upstream(crds: Path) -> dict[str, dict[str, str]]:
    """Per CRD file, its repository, path and last change, from the ``## Files`` table of SOURCES.md."""
    notes = crds / "SOURCES.md"
    if not notes.is_file():
        return {}
    rows: dict[str, dict[str, str]] = {}
    for line in notes.read_text().split("## Files", 1)[-1].split("\n## ", 1)[0].splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 4 and cells[0].endswith(".yaml"):
            rows[cells[0]] = {"repository": cells[1], "path": cells[2], "lastChange": cells[3]}
    return rows


def _copies(shared: Path, relative: list[str], upstream: dict[str, dict[str, str]]) -> dict[str, bytes]:
    """Byte-for-byte copies of files under ``shared``, by file name, plus a SOURCES.yaml recording each origin."""
    out: dict[str, bytes] = {}
    record: dict[str, dict[str, str]] = {}
    for rel in relative:
        name = Path(rel).name
        try:
            data = (shared / rel).read_bytes()
        except OSError as err:
            raise StackFileError(f"{shared / rel}: {err.strerror}") from None
        out[name] = data
        record[name] = {"copiedFrom": rel, "sha256": hashlib.sha256(data).hexdigest(), **upstream.get(name, {})}
    out[SOURCES] = (
        "# Where each file here comes from. Written by `./dev refresh`; do not edit.\n"
        + yaml.safe_dump(record, sort_keys=True, width=200)
    ).encode()
    return out


def collect(shared: Path, recipes: Path, release: lock.AicrRelease) -> dict[str, bytes]:
    """Every file of the folders under facts/ this command owns, by path relative to facts/."""
    catalogue = read(STACKS_DIR / CATALOGUE, Catalogue)
    stack_files = [read(p, StackFile) for p in stack_paths(STACKS_DIR)]
    locked = lock.build(
        aicr.load(recipes),
        release,
        [s.aicr.query for s in stack_files],
        {c.aicr for c in catalogue.components.values() if c.aicr},
    )
    files = {f"aicr/{lock.LOCK_FILE}": lock.text(locked).encode()}
    manifests = sorted(
        {
            c.manifestFile.file
            for c in catalogue.components.values()
            if c.manifestFile and c.manifestFile.folder == MANIFESTS
        }
    )
    copied = _copies(shared, manifests, {})
    files |= {f"{MANIFESTS}/{name}": data for name, data in copied.items()}
    crd_dir = shared / "crds"
    crds = sorted(crd_dir.glob("*.yaml"))
    if not crds:
        raise StackFileError(f"{crd_dir}: no CRD files")
    copied = _copies(shared, [f"crds/{p.name}" for p in crds], _upstream(crd_dir))
    files |= {f"crds/{name}": data for name, data in copied.items()}
    charts = chart_inventory.inventories(shared / "charts")
    files |= {f"charts/{name}": text.encode() for name, text in charts.items()}
    files |= {f"helm/{name}": data for name, data in chart_packages.packages(shared / "charts").items()}
    return files


def stale(facts: Path, files: dict[str, bytes]) -> list[str]:
    """Files under the owned folders that differ from ``files``, are missing or are extra."""
    present = {p.relative_to(facts).as_posix() for d in OWNED for p in (facts / d).rglob("*") if p.is_file()}
    return sorted(
        name
        for name in present | set(files)
        if name not in files or name not in present or (facts / name).read_bytes() != files[name]
    )


def write(facts: Path, files: dict[str, bytes]) -> None:
    for name in stale(facts, files):
        path = facts / name
        if name in files:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(files[name])
        else:
            path.unlink()


@click.command()
@click.argument("shared", type=click.Path(path_type=Path), default=DEFAULT_SHARED)
@click.option(
    "--recipes", type=click.Path(path_type=Path), help="recipes/ of an AICR checkout. Default: SHARED/aicr/recipes."
)
@click.option("--aicr-version", help="AICR release tag, when the recipes have no VERSION.md beside them.")
@click.option("--aicr-commit", help="AICR commit, likewise.")
@click.option("--facts", type=click.Path(path_type=Path), default=FACTS_DIR, show_default=True)
@click.option("--check", is_flag=True, help="Exit 1, naming them, when facts/ files differ from the sources.")
def main(
    shared: Path, recipes: Path | None, aicr_version: str | None, aicr_commit: str | None, facts: Path, check: bool
) -> None:
    try:
        if not shared.is_dir():
            raise StackFileError(f"{shared}: no such directory (the reference sources to refresh facts/ from)")
        recipes = recipes or shared / "aicr" / "recipes"
        files = collect(shared, recipes, aicr_release(recipes, aicr_version, aicr_commit))
    except (StackFileError, AicrError, chart_inventory.InventoryError, OSError, yaml.YAMLError) as err:
        click.echo(f"refresh: {err}", err=True)
        sys.exit(2)
    changed = stale(facts, files)
    if check:
        for name in changed:
            click.echo(f"stale: facts/{name}")
        if changed:
            click.echo("facts/ is out of date: run `./dev refresh` and commit the result.", err=True)
            sys.exit(1)
        click.echo(f"facts/ is up to date ({len(files)} files)")
        return
    write(facts, files)
    click.echo(f"facts/: {len(changed)} of {len(files)} files rewritten")


if __name__ == "__main__":
    main()
