"""Chart inventories (facts/charts/): how they are read from chart sources, and that they are current."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from generator import chart_inventory as ci
from tests.support.parity import reference_source
from tests.support.repo import REPO

FACTS = REPO / "facts" / "charts"


def _write(path: Path, data: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data))


@pytest.fixture
def charts(tmp_path: Path) -> Path:
    """A parent chart with a vendored, aliased dependency and one found as a sibling folder."""
    parent = tmp_path / "app-1.2.3"
    _write(
        parent / "Chart.yaml",
        {
            "name": "app",
            "version": "0.0.0",
            "appVersion": "v0.0.0",
            "dependencies": [
                {"name": "sub", "alias": "helper", "version": "1.0.0", "condition": "helper.enabled"},
                {"name": "lib", "version": "2.0.0"},
                {"name": "absent", "version": "9.9.9", "condition": "absent.enabled"},
            ],
        },
    )
    _write(parent / "SOURCE", "example.com/app at v1.2.3, chart\n")
    _write(
        parent / "values.yaml",
        {
            "image": {"repository": "quay.io/app/controller", "tag": ""},
            "sidecarImage": "docker.io/library/busybox:1.36",
            "imageRegistry": "",
            "pullPolicy": "IfNotPresent",
            "helper": {"replicas": 2},
        },
    )
    _write(parent / "templates" / "deploy.yaml", "image: {{ .Values.image.repository }}:{{ $.Values.image.tag }}\n")
    sub = parent / "charts" / "sub"
    _write(sub / "Chart.yaml", {"name": "sub", "version": "1.0.0"})
    _write(sub / "values.yaml", {"replicas": 1, "enabled": False, "image": {"registry": "r.io", "repository": "s"}})
    _write(sub / "templates" / "_helpers.tpl", '{{ define "x" }}{{ .Values.replicas }}{{ end }}')
    lib = tmp_path / "lib-2.0.0"
    _write(lib / "Chart.yaml", {"name": "lib", "version": "2.0.0"})
    _write(lib / "values.yaml", {"relatedImageWorker": "docker.io/lib/worker:v2", "relatedImageWorkerPullSecret": ""})
    return tmp_path


def test_inventory_of_a_chart_with_dependencies(charts: Path) -> None:
    inv = ci.inventory(charts / "app-1.2.3", charts)
    assert (inv["chart"], inv["version"], inv["source"]) == ("app", "1.2.3", "example.com/app at v1.2.3, chart")
    # appVersion filled at release (v0.0.0 in git): the release's own version.
    assert inv["appVersion"] == "1.2.3"
    # The parent's values for a dependency lie over the dependency's defaults, under its alias.
    assert inv["values"]["helper"] == {
        "replicas": 2,
        "enabled": False,
        "image": {"registry": "r.io", "repository": "s"},
    }
    assert inv["values"]["lib"]["relatedImageWorker"] == "docker.io/lib/worker:v2"
    assert [(i["path"], i["shape"]) for i in inv["images"]] == [
        ("helper.image", "registry+repository"),
        ("image", "repository+tag"),
        ("sidecarImage", "ref"),
        ("lib.relatedImageWorker", "ref"),
    ]
    assert inv["templateValues"] == ["helper.replicas", "image.repository", "image.tag"]
    assert [(d["name"], d["sources"]) for d in inv["dependencies"]] == [
        ("sub", "app-1.2.3/charts/sub"),
        ("lib", "lib-2.0.0"),
        ("absent", "not in the chart sources"),
    ]


def test_folder_name_must_carry_the_version(tmp_path: Path) -> None:
    _write(tmp_path / "noversion" / "Chart.yaml", {"name": "x"})
    with pytest.raises(ci.InventoryError, match="<chart>-<version>"):
        ci.inventories(tmp_path)


def test_kept_inventories_name_their_chart_and_version() -> None:
    files = sorted(FACTS.glob("*.yaml"))
    assert len(files) >= 12
    for file in files:
        inv = yaml.safe_load(file.read_text())
        assert f"{inv['chart']}-{inv['version']}.yaml" == file.name or file.name.endswith(f"-{inv['version']}.yaml")
        assert inv["source"], file.name
    lws = yaml.safe_load((FACTS / "lws-v0.8.0.yaml").read_text())
    # The release sets the manager image's tag; git's `main` would be wrong.
    manager = lws["values"]["image"]["manager"]
    assert (manager["repository"], manager["tag"]) == ("registry.k8s.io/lws/lws", "v0.8.0")


def test_kept_inventories_match_the_chart_sources() -> None:
    # Parity: skipped on a clone with no reference sources beside it.
    expected = ci.inventories(reference_source("charts"))
    kept = {p.name: p.read_text() for p in FACTS.glob("*.yaml")}
    stale = sorted(n for n in expected.keys() | kept.keys() if expected.get(n) != kept.get(n))
    assert stale == [], f"facts/charts is stale for {stale}: run ./dev refresh"
