"""`function render` takes crossplane render's arguments and flags and reads the Input from the Composition."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from click.testing import Result

from tests.support.repo import EXAMPLE, load_docs
from tests.support.serve import Invoke

XR = str(EXAMPLE / "xr.yaml")
COMPOSITION = str(EXAMPLE / "composition.yaml")
FUNCTIONS = str(EXAMPLE / "functions.yaml")
OBSERVED = str(EXAMPLE / "observed")
CONFIGS = str(EXAMPLE / "environmentconfigs")


def _docs(result: Result) -> list[dict[str, Any]]:
    assert result.exit_code == 0, result.output
    return list(yaml.safe_load_all(result.output))


def _kinds(result: Result) -> list[str]:
    return [d["kind"] for d in _docs(result)]


def test_crossplane_render_command_line_works_unchanged(invoke: Invoke) -> None:
    long = invoke(
        "render",
        XR,
        COMPOSITION,
        FUNCTIONS,
        "--observed-resources",
        OBSERVED,
        "--required-resources",
        CONFIGS,
        "--include-function-results",
    )
    short = invoke("render", XR, COMPOSITION, FUNCTIONS, "-o", OBSERVED, "-e", CONFIGS, "-r")
    old = invoke("render", XR, "--observed", OBSERVED, "--extra-resources", CONFIGS, "-r")  # the old flags still work
    assert long.output == short.output == old.output
    assert _kinds(long)[-1] == "Result"


def test_include_full_xr_and_context(invoke: Invoke) -> None:
    docs = _docs(invoke("render", XR, COMPOSITION, "-o", OBSERVED, "-x", "-c"))
    assert docs[0]["spec"]["cloud"] == "GKE" and docs[0]["metadata"]["labels"]
    assert docs[-1]["kind"] == "Context"
    plain = _docs(invoke("render", XR, COMPOSITION, "-o", OBSERVED))
    assert "spec" not in plain[0]


def _with_context(invoke: Invoke, *flags: str) -> dict[str, Any]:
    docs = _docs(invoke("render", XR, COMPOSITION, "-o", OBSERVED, "-c", *flags))
    status: dict[str, Any] = docs[0]["status"]["stack"]
    return {"status": status, "context": docs[-1]["fields"], "docs": docs}


def test_context_values_and_files(invoke: Invoke) -> None:
    key = "apiextensions.crossplane.io/environment"
    from_file = _with_context(invoke, "--context-files", f"{key}={EXAMPLE / 'context' / 'environment.yaml'}")
    assert from_file["status"]["environmentConfigs"] == [f"context:{key}"]
    envoy = next(
        d
        for d in from_file["docs"]
        if d["metadata"].get("annotations", {}).get("crossplane.io/composition-resource-name") == "envoy-gateway"
    )
    assert envoy["metadata"]["annotations"]["servingstack.modelplane.ai/overridden-by"] == f"context:{key}"
    # --context-values wins over --context-files on the same key, as in render.
    value = json.dumps({"servingStack": {"components": {"prometheus": {"state": "Unmanaged"}}}})
    both = _with_context(
        invoke,
        "--context-files",
        f"{key}={EXAMPLE / 'context' / 'environment.yaml'}",
        "--context-values",
        f"{key}={value}",
        "--context-values",
        'example.org/other={"a": 1}',
    )
    assert both["context"][key] == json.loads(value)
    assert both["context"]["example.org/other"] == {"a": 1}


def test_bad_context_flags_fail_in_one_line(tmp_path: Path, invoke: Invoke) -> None:
    for flags, message in (
        (("--context-values", "no-equals"), "--context-values no-equals: expected KEY=VALUE"),
        (("--context-files", f"k={tmp_path / 'missing.yaml'}"), "--context-files k: cannot read"),
        (("--context-values", "k={unclosed"), "--context-values k: not JSON or YAML"),
    ):
        result = invoke("render", XR, *flags)
        assert result.exit_code == 1
        assert message in result.output


def test_the_input_comes_from_the_composition(tmp_path: Path, invoke: Invoke) -> None:
    """A Composition whose Input names a Required EnvironmentConfig that is absent: a Fatal proves it was read."""
    [composition] = load_docs(EXAMPLE / "composition.yaml")
    composition["spec"]["pipeline"][0]["input"]["spec"] = {"names": [{"name": "bank-mirror"}]}
    path = tmp_path / "composition.yaml"
    path.write_text(yaml.safe_dump(composition))
    result = invoke("render", XR, str(path), "-o", OBSERVED, "-e", CONFIGS)
    assert result.exit_code == 1
    assert "EnvironmentConfig bank-mirror not found" in result.output
    assert len(result.output.strip().splitlines()) == 1
    # Selecting only by name: the label-selected example documents no longer apply.
    composition["spec"]["pipeline"][0]["input"]["spec"] = {"selectors": []}
    path.write_text(yaml.safe_dump(composition))
    docs = _docs(invoke("render", XR, str(path), "-o", OBSERVED, "-e", CONFIGS))
    assert docs[0]["status"]["stack"]["environmentConfigs"] == []
    # Both a Composition and --input: ambiguous, refused.
    both = invoke(
        "render",
        XR,
        str(path),
        "--input",
        str(EXAMPLE.parent / "package" / "input" / "servingstack.fn.modelplane.ai_inputs.yaml"),
    )
    assert both.exit_code == 1 and "not both" in both.output


def test_composition_checks_and_foreign_steps(tmp_path: Path, invoke: Invoke) -> None:
    other = invoke("render", XR, str(EXAMPLE / "context" / "composition.yaml"))
    assert other.exit_code == 1
    assert 'pipeline step "environment-configs" runs Function "function-environment-configs"' in other.output
    xr = load_docs(EXAMPLE / "xr.yaml")[0]
    xr["kind"] = "Other"
    (tmp_path / "xr.yaml").write_text(yaml.safe_dump(xr))
    result = invoke("render", str(tmp_path / "xr.yaml"), COMPOSITION)
    assert result.exit_code == 1
    assert "compositeTypeRef.kind (ServingStack) does not match XR's kind (Other)" in result.output


def test_cli_render_takes_environment_config_files(invoke: Invoke) -> None:
    out = invoke("render", "example/xr.yaml", "-o", "example/observed/", "-e", "example/environmentconfigs/", "-r")
    assert out.exit_code == 0, out.stderr
    docs = list(yaml.safe_load_all(out.stdout))
    release = next(
        d
        for d in docs
        if d.get("kind") == "Release"
        and d["metadata"]["annotations"].get("crossplane.io/composition-resource-name") == "cert-manager"
    )
    assert release["metadata"]["annotations"]["servingstack.modelplane.ai/overridden-by"] == "regulated-bank,prod-hold"
    assert any(d.get("kind") == "Result" and "EnvironmentConfigs applied" in d["message"] for d in docs)
