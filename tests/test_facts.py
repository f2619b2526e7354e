"""facts/: what the repository keeps from outside, and the refresh command that writes it.

Parity tests compare facts/ with the reference sources (``tests/support/parity.py``) where they
exist and are skipped otherwise; the rest runs on any clone.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from generator import lock, refresh
from generator.build import FACTS_DIR, REPO
from generator.stackfile import AicrQuery, StackFileError
from tests.support.parity import reference_source


def _collect() -> dict[str, bytes]:
    shared = reference_source("aicr/recipes").parents[1]
    recipes = shared / "aicr" / "recipes"
    return refresh.collect(shared, recipes, refresh.aicr_release(recipes, None, None))


def test_parity_facts_are_what_refresh_writes_from_the_reference_sources() -> None:
    assert refresh.stale(FACTS_DIR, _collect()) == []


def test_parity_refresh_check_exits_0_on_current_facts() -> None:
    reference_source("aicr/recipes")
    run = subprocess.run(
        [sys.executable, "-m", "generator.refresh", "--check"], cwd=REPO, capture_output=True, text=True, check=False
    )
    assert (run.returncode, run.stdout.strip()) == (0, f"facts/ is up to date ({len(_collect())} files)")


def test_parity_refresh_rewrites_stale_and_removes_orphaned_files(tmp_path: Path) -> None:
    files = _collect()
    facts = tmp_path / "facts"
    shutil.copytree(FACTS_DIR, facts)
    (facts / "crds" / "helm.m.crossplane.io_releases.yaml").write_text("stale")
    (facts / "crds" / "gone.yaml").write_text("kind: CustomResourceDefinition")
    assert refresh.stale(facts, files) == ["crds/gone.yaml", "crds/helm.m.crossplane.io_releases.yaml"]
    refresh.write(facts, files)
    assert refresh.stale(facts, files) == []
    assert not (facts / "crds" / "gone.yaml").exists()


def test_every_copied_file_is_recorded_with_its_origin_and_digest() -> None:
    for folder in ("crds", "manifests"):
        sources = yaml.safe_load((FACTS_DIR / folder / "SOURCES.yaml").read_text())
        files = {p.name for p in (FACTS_DIR / folder).iterdir()} - {"SOURCES.yaml"}
        assert set(sources) == files
        for name, origin in sources.items():
            assert origin["sha256"] == hashlib.sha256((FACTS_DIR / folder / name).read_bytes()).hexdigest()
            assert origin["copiedFrom"].endswith(name)
    crds = yaml.safe_load((FACTS_DIR / "crds" / "SOURCES.yaml").read_text())
    assert crds["helm.m.crossplane.io_releases.yaml"]["repository"] == "crossplane-contrib/provider-helm"


def test_lock_names_the_aicr_release_and_every_stack_query() -> None:
    locked = lock.read(FACTS_DIR)
    assert (locked.aicr.version, locked.aicr.commit) == ("v0.11.1", "bc05c6be7859cee7ce6680b93333ed03ba795f88")
    eks = locked.find(AicrQuery(service="eks", intent="inference"), "eks")
    assert eks.appliedOverlays == ["base", "monitoring-hpa", "eks", "eks-inference"]
    gpu = eks.components["gpu-operator"]
    assert (gpu.chart, gpu.repository, gpu.version) == (
        "gpu-operator",
        "https://helm.ngc.nvidia.com/nvidia",
        "v25.10.1",
    )
    assert "kgateway" in eks.notTaken


def test_lock_text_round_trips() -> None:
    text = (FACTS_DIR / "aicr" / lock.LOCK_FILE).read_text()
    assert lock.text(lock.read(FACTS_DIR)) == text


def test_refresh_without_sources_is_one_readable_line(tmp_path: Path) -> None:
    run = subprocess.run(
        [sys.executable, "-m", "generator.refresh", str(tmp_path / "nowhere"), "--facts", str(tmp_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 2
    assert run.stderr.count("\n") == 1
    assert (
        run.stderr
        == f"refresh: {tmp_path / 'nowhere'}: no such directory (the reference sources to refresh facts/ from)\n"
    )


def test_aicr_release_from_a_checkout_without_version_file(tmp_path: Path) -> None:
    with pytest.raises(StackFileError, match=r"VERSION.md: missing; pass --aicr-version and --aicr-commit"):
        refresh.aicr_release(tmp_path / "recipes", None, None)
    release = refresh.aicr_release(tmp_path, "v9.9.9", "0" * 40)
    assert (release.version, release.commit) == ("v9.9.9", "0" * 40)
    with pytest.raises(StackFileError, match="pass --aicr-version and --aicr-commit"):
        refresh.aicr_release(tmp_path, "v9.9.9", None)
