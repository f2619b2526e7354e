"""Checking before applying: ``function validate`` and the exported JSON Schema of the override document."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema  # type: ignore[import-untyped, unused-ignore]
import pytest
import yaml

from function.overrides import schema
from function.overrides.document import OverrideDocument
from tests.support.overrides import STACKS, ec, fatal
from tests.support.repo import EXAMPLE, REPO, load_docs
from tests.support.serve import Invoke
from tests.support.xr import make_xr

CONFIGS = EXAMPLE / "environmentconfigs"


def validate(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "function.main", "validate", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )


def write(tmp_path: Path, name: str, *docs: dict[str, Any]) -> str:
    path = tmp_path / name
    path.write_text(yaml.safe_dump_all(docs))
    return str(path)


def test_the_shipped_examples_validate_against_every_stack_and_the_example_xr(invoke: Invoke) -> None:
    out = invoke("validate", "-e", str(CONFIGS))
    assert out.exit_code == 0, out.stdout + out.stderr
    assert out.stdout == ""
    assert out.stderr == "function validate: 5 documents against every generated stack: 0 fatal, 0 warnings\n"
    out = invoke("validate", "-e", str(CONFIGS), "--xr", "example/xr.yaml")
    assert out.exit_code == 0, out.stdout + out.stderr
    assert "against 1 ServingStacks: 0 fatal" in out.stderr


def test_a_bad_document_fails_with_the_message_the_function_gives(tmp_path: Path, invoke: Invoke) -> None:
    bad = ec("nv", {"match": {"accelerators": ["NVIDIA"]}, "components": {"amd-gpu-operator": {"state": "Removed"}}})
    path = write(tmp_path, "bad.yaml", bad)
    out = invoke("validate", "-e", path)
    assert out.exit_code == 1
    lines = out.stdout.splitlines()
    # Every NVIDIA stack, one line each; no AMD stack (the match excludes them).
    assert [line.split(": ", 2)[1] for line in lines] == [
        f"stack {cloud}-nvidia{suffix}"
        for cloud in ("aks", "eks", "existing", "gke", "nebius", "vultr")
        for suffix in ("", "-dynamo")
    ]
    function_says = fatal(make_xr("EKS"), bad).split("returned a fatal result: ", 1)[1]
    assert f"fatal: stack eks-nvidia: {function_says}" in lines
    assert out.stderr.endswith("0 warnings\n") and "12 fatal" in out.stderr


def test_against_given_xrs_the_function_itself_runs(tmp_path: Path, invoke: Invoke) -> None:
    hold = ec("hold", {"match": {"clouds": ["EKS"]}, "components": {"cert-manager": {"version": "v1.17.2"}}})
    typo = ec("typo", {})
    typo["data"] = {"servingstack": {}}
    other = make_xr("GKE")
    other["metadata"]["name"] = "prod-us-1"
    xrs = write(tmp_path, "xrs.yaml", make_xr("EKS"), other)
    out = invoke("validate", "-e", write(tmp_path, "hold.yaml", hold), "--xr", xrs)
    # A pin equal to the generated version: the function's Warning, on the EKS ServingStack only.
    [line] = out.stdout.splitlines()
    assert line.startswith(f"warning: ServingStack prod-eu-1 ({xrs}): EnvironmentConfig hold: data.servingStack")
    assert "the pin is redundant" in line and out.exit_code == 0
    assert (
        invoke("validate", "-e", write(tmp_path, "hold.yaml", hold), "--xr", xrs, "--warnings-as-errors").exit_code == 1
    )
    out = invoke("validate", "-e", write(tmp_path, "typo.yaml", typo), "--xr", xrs)
    assert out.exit_code == 1
    assert out.stdout.splitlines() == [
        f"fatal: ServingStack {name} ({xrs}): EnvironmentConfig typo: data.servingstack: the override document "
        "goes under data.servingStack (case matters)"
        for name in ("prod-eu-1", "prod-us-1")
    ]


def test_unselected_documents_and_required_inputs(tmp_path: Path, invoke: Invoke) -> None:
    unlabelled = ec("unlabelled", {"priority": 1}, labels={})
    out = invoke("validate", "-e", write(tmp_path, "u.yaml", unlabelled))
    assert out.exit_code == 0
    assert out.stdout == (
        "warning: EnvironmentConfig unlabelled carries data.servingStack, but the function does not select it "
        "(no label servingstack.modelplane.ai/overrides=true, nor selected or named by the function Input)\n"
    )
    near_miss = ec("near", {}, labels={})
    near_miss["data"] = {"servingstack": {}}
    out = invoke("validate", "-e", write(tmp_path, "n.yaml", near_miss))
    assert out.stdout.startswith("warning: EnvironmentConfig near carries data.servingstack, but the function does")
    step = {"apiVersion": "servingstack.fn.modelplane.ai/v1beta1", "kind": "Input", "spec": {"names": [{"name": "b"}]}}
    out = invoke("validate", "-e", write(tmp_path, "u.yaml", unlabelled), "--input", write(tmp_path, "in.yaml", step))
    assert out.exit_code == 1
    assert out.stdout.startswith("fatal: function Input: EnvironmentConfig b not found, and its policy is Required")
    bad_input = invoke(
        "validate", "-e", str(CONFIGS), "--input", write(tmp_path, "in.yaml", {**step, "spec": {"x": 1}})
    )
    assert bad_input.exit_code == 1 and bad_input.stderr.count("\n") == 1
    assert "function Input servingstack.fn.modelplane.ai/v1beta1: spec.x: unknown field" in bad_input.stderr


def test_nan_or_infinity_in_a_file_is_one_readable_line(tmp_path: Path, invoke: Invoke) -> None:
    """YAML's .nan and .inf reach the check as the function reads them: a Fatal naming the field, no traceback."""
    for value, shown in ((float("nan"), "nan"), (float("-inf"), "-inf")):
        bad = ec("odd", {"priority": value})
        bad["data"]["other"] = float("nan")  # another function's data: not ours to judge
        out = invoke("validate", "-e", write(tmp_path, "odd.yaml", bad))
        assert out.exit_code == 1, out.stdout + out.stderr
        assert out.stdout == (
            f"fatal: EnvironmentConfig odd: data.servingStack.priority: {shown} is not a number JSON or "
            "Kubernetes can hold\n"
        )
        assert out.stderr == "function validate: 1 documents against every generated stack: 1 fatal, 0 warnings\n"
        out = invoke("validate", "-e", write(tmp_path, "odd.yaml", bad), "--xr", "example/xr.yaml")
        assert out.exit_code == 1 and "Traceback" not in out.stderr
        assert out.stdout.endswith(f"data.servingStack.priority: {shown} is not a number JSON or Kubernetes can hold\n")


def test_an_input_registry_policy_is_checked_on_every_stack(tmp_path: Path, invoke: Invoke) -> None:
    policy = {
        "apiVersion": "servingstack.fn.modelplane.ai/v1beta1",
        "kind": "Input",
        "spec": {"registry": {"strict": True, "allowedRegistries": ["artifactory.bank.example"]}},
    }
    path = write(tmp_path, "in.yaml", policy)
    out = invoke(
        "validate", "-e", write(tmp_path, "none.yaml", ec("unrelated", {"priority": 1}, labels={})), "--input", path
    )
    assert out.exit_code == 1
    lines = [line for line in out.stdout.splitlines() if line.startswith("fatal: ")]
    assert len(lines) == len(STACKS)  # no document mirrors anything: every stack fails
    assert out.stderr.startswith(f"function validate: 1 documents against every generated stack: {len(STACKS)} fatal")
    # The bank's documents satisfy it everywhere.
    assert invoke("validate", "-e", str(CONFIGS), "--input", path).exit_code == 0


def test_the_exported_schema_is_current() -> None:
    assert schema.main(["--check"]) == 0, "run: python -m function.overrides.schema"


DOCUMENT_SCHEMA = json.loads((REPO / "schema" / "override-document.schema.json").read_text())
CONFIG_SCHEMA = json.loads((REPO / "schema" / "environmentconfig.schema.json").read_text())


def test_the_schema_accepts_the_shipped_examples_as_editors_see_them() -> None:
    for config in load_docs(CONFIGS):
        jsonschema.Draft202012Validator(CONFIG_SCHEMA).validate(config)
        jsonschema.Draft202012Validator(DOCUMENT_SCHEMA).validate(config["data"]["servingStack"])


@pytest.mark.parametrize(
    "doc",
    [
        {"priorty": 1},
        {"match": {"clouds": ["OpenShift"]}},
        {"match": {"accelerators": ["TPU"]}},
        {"match": {"namespaces": [""]}},
        {"components": {"x": {"state": "Deleted"}}},
        {"components": {"x": {"replicas": "2"}}},
        {"registry": {"images": [{"from": "a.io"}]}},
        {"registry": {"strict": "yes"}},
        {"drivers": [{"name": "H100", "nodeSelector": {"a": "b"}, "version": "1"}]},
        {"retired": "true"},
    ],
)
def test_the_schema_rejects_what_the_function_rejects(doc: dict[str, Any]) -> None:
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft202012Validator(DOCUMENT_SCHEMA).validate(doc)
    with pytest.raises(ValueError):
        OverrideDocument.model_validate(doc)
