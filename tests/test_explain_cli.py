"""``function explain``: where every field of every component comes from, as text or YAML."""

from __future__ import annotations

from typing import Any

import yaml

from tests.support.overrides import ec
from tests.support.serve import Invoke


def test_cli_explain_names_the_source_of_every_field(invoke: Invoke) -> None:
    out = invoke("explain", "example/xr.yaml", "-e", "example/environmentconfigs/")
    assert out.exit_code == 0, out.stderr
    text = out.stdout
    assert "EnvironmentConfigs applied, in order: regulated-bank, prod-hold" in text
    assert "cert-manager: Release, Managed, from aicr:cert-manager; changed by regulated-bank, prod-hold" in text
    section = text.split("\ncert-manager: ", 1)[1].split("\n\n", 1)[0]
    lines = {line.split()[0]: line for line in section.splitlines() if line.startswith("  ")}
    assert lines["chart.version"].endswith("[prod-hold]")
    assert "[generated]" in lines["values.crds.keep"]
    changed = invoke("explain", "example/xr.yaml", "-e", "example/environmentconfigs/", "--only-changed").stdout
    assert "[generated]" not in changed and "gateway-namespace" not in changed


def test_cli_explain_yaml_and_errors(invoke: Invoke) -> None:
    out = invoke("explain", "example/xr.yaml", "-e", "example/environmentconfigs/", "-O", "yaml")
    data = yaml.safe_load(out.stdout)
    assert data["environmentConfigs"] == ["regulated-bank", "prod-hold"]
    cm = next(c for c in data["components"] if c["name"] == "cert-manager")
    assert {"path": "chart.version", "value": "v1.17.1", "from": "prod-hold"} in cm["fields"]
    plain = yaml.safe_load(invoke("explain", "example/xr.yaml", "-O", "yaml").stdout)
    assert plain["environmentConfigs"] == [] and all(
        f["from"] == "generated" for c in plain["components"] for f in c["fields"]
    )


def test_cli_explain_of_a_bad_document_fails_in_one_line(tmp_path: Any, invoke: Invoke) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(ec("bad", {"components": {"nope": {}}})))
    out = invoke("explain", "example/xr.yaml", "-e", str(bad))
    assert out.exit_code == 1
    assert out.stderr.count("\n") == 1 and "EnvironmentConfig bad: data.servingStack.components.nope" in out.stderr
