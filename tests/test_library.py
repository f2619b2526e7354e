"""The library API forks build on, the transform hook's rules, and the fork example's facts."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import acme_fn  # type: ignore[import-not-found, unused-ignore]  # example/fork, on pytest's pythonpath
import pytest
import yaml
from google.protobuf import json_format

from function.library import (
    FunctionRunner,
    InputError,
    RenderError,
    load_stack,
    override_documents,
    render,
)
from function.offline import run_pipeline
from function.render_output import dump_yaml
from tests.support import k8s_schema
from tests.support.crossplane import grpc_runner
from tests.support.repo import EXAMPLE, REPO, load_docs
from tests.support.serve import serving
from tests.support.xr import make_xr, provider_configs

FORK = EXAMPLE / "fork"


def test_load_stack_and_its_errors() -> None:
    assert load_stack("GKE").id == "gke-nvidia"
    assert load_stack("Vultr", "AMD").id == "vultr-amd"
    with pytest.raises(InputError, match=r"no stack for GKE/AMD; stacks exist for .*GKE/NVIDIA"):
        load_stack("GKE", "AMD")
    with pytest.raises(InputError, match="no stack for Moon/NVIDIA"):
        load_stack("Moon")


def test_override_documents_validated_as_the_function_does() -> None:
    docs = override_documents(load_docs(EXAMPLE / "environmentconfigs"))
    assert sorted(d.name for d in docs) == ["byo-cluster", "gpu-pools", "gpu-pools-amd", "prod-hold", "regulated-bank"]
    assert (
        override_documents(
            [
                {
                    "apiVersion": "apiextensions.crossplane.io/v1beta1",
                    "kind": "EnvironmentConfig",
                    "metadata": {"name": "other"},
                    "data": {"unrelated": 1},
                }
            ]
        )
        == []
    )
    bad = {"metadata": {"name": "typo"}, "data": {"servingStack": {"componets": {}}}}
    with pytest.raises(InputError, match=r"EnvironmentConfig typo: data\.servingStack\.componets: unknown field"):
        override_documents([bad])


def test_render_is_what_the_function_renders() -> None:
    xr = make_xr("GKE")
    rendered = render(xr, observed=provider_configs(xr), environment_configs=load_docs(EXAMPLE / "environmentconfigs"))
    assert rendered.status["stack"]["environmentConfigs"] == ["regulated-bank", "prod-hold"]
    assert rendered.resources["cert-manager"]["spec"]["forProvider"]["chart"]["version"] == "v1.17.1"
    # The summary.
    assert [s for s, _ in rendered.results] == ["SEVERITY_NORMAL"]
    # The same documents `function render` prints.
    expected = (EXAMPLE / "expected" / "prod-eu-1+all.yaml").read_text()
    composition = yaml.safe_load((EXAMPLE / "composition.yaml").read_text())
    again = render(
        load_docs(EXAMPLE / "xr.yaml")[0],
        observed=load_docs(EXAMPLE / "observed"),
        environment_configs=load_docs(EXAMPLE / "environmentconfigs"),
        composition=composition,
    )
    assert dump_yaml(again.documents()) == expected


def test_render_raises_on_a_fatal() -> None:
    with pytest.raises(RenderError, match=r"spec\.cloud"):
        render(make_xr("Moon"))


def _label_all(_xr: Any, resources: dict[str, dict[str, Any]]) -> None:
    for body in resources.values():
        body.setdefault("metadata", {}).setdefault("labels", {})["team"] = "a"


def test_transforms_run_in_order_on_every_response() -> None:
    seen: list[str] = []

    def first(_xr: Any, resources: dict[str, dict[str, Any]]) -> None:
        seen.append("first")
        assert all("team" in b["metadata"]["labels"] for b in resources.values())

    xr = make_xr("GKE")
    rendered = render(xr, observed=provider_configs(xr), transforms=(_label_all, first))
    assert seen == ["first"]  # once: on the call that composed (the first call only asks for documents)
    assert all(b["metadata"]["labels"]["team"] == "a" for b in rendered.resources.values())
    assert FunctionRunner(transforms=[_label_all]).transforms == (_label_all,)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda r: r.pop("cert-manager"), r"not add or remove them \(added \[\], removed \['cert-manager'\]\)"),
        (lambda r: r.__setitem__("extra", {"kind": "X"}), r"added \['extra'\]"),
    ],
)
def test_transforms_cannot_add_or_remove_resources(change: Any, message: str) -> None:
    """Removing a desired resource deletes it from the cluster: only an explicit override may."""
    xr = make_xr("GKE")
    with pytest.raises(RenderError, match=message):
        render(xr, observed=provider_configs(xr), transforms=(lambda _, r: change(r),))


def test_transform_input_error_is_a_fatal_naming_it() -> None:
    def refuse(_xr: Any, _resources: dict[str, dict[str, Any]]) -> None:
        raise InputError("ServingStack team-ml/prod-eu-1: spec.cloud: ACME runs no GKE clusters")

    with pytest.raises(RenderError, match=r"transform .*refuse: ServingStack team-ml/prod-eu-1: spec\.cloud"):
        render(make_xr("GKE"), observed=provider_configs(make_xr("GKE")), transforms=(refuse,))


def test_transform_leaving_a_value_that_is_not_json_is_a_fatal_naming_the_resource() -> None:
    def stamp(_xr: Any, resources: dict[str, dict[str, Any]]) -> None:
        resources["cert-manager"]["metadata"]["stamp"] = object()

    with pytest.raises(RenderError, match=r"transforms .*stamp: resource cert-manager: not a JSON value: object"):
        render(make_xr("GKE"), observed=provider_configs(make_xr("GKE")), transforms=(stamp,))


def test_fork_example_is_about_forty_lines() -> None:
    assert len((FORK / "acme_fn.py").read_text().splitlines()) <= 50


def test_fork_hardens_a_value_its_chart_reads() -> None:
    """podSecurityContext is a value the pinned LeaderWorkerSet chart's templates read (facts/charts)."""
    component = next(c for c in load_stack("GKE").components if c.key == acme_fn.HARDENED)
    assert component.chart is not None
    inventory = yaml.safe_load(
        (REPO / "facts" / "charts" / f"{component.chart.name}-{component.chart.version}.yaml").read_text()
    )
    assert "podSecurityContext" in inventory["templateValues"]


def test_imageconfig_is_valid_and_points_at_the_published_package() -> None:
    [config] = load_docs(FORK / "imageconfig.yaml")
    assert k8s_schema.covered(config), "no ImageConfig CRD among the schemas"
    assert k8s_schema.validate(config) == []
    [function] = load_docs(EXAMPLE / "functions.yaml")
    [match] = config["spec"]["matchImages"]
    assert function["spec"]["package"].startswith(match["prefix"] + ":")
    assert config["spec"]["rewriteImage"]["prefix"] != match["prefix"]


def _fork_env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(FORK), os.environ.get("PYTHONPATH", "")])}


def test_fork_cli_renders_with_its_rules() -> None:
    """The fork's entry point is the same CLI: its render subcommand runs the fork's runner."""
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "acme_fn",
            "render",
            "example/xr.yaml",
            "example/composition.yaml",
            "-o",
            "example/observed/",
        ],
        cwd=REPO,
        env=_fork_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    releases = [d for d in yaml.safe_load_all(out.stdout) if d["kind"] == "Release"]
    assert releases and all(r["metadata"]["labels"]["acme.example/owner"] == "team-ml" for r in releases)


def test_fork_serves_its_rules_over_grpc(tmp_path: Path) -> None:
    xr = make_xr("GKE")
    with serving(["acme_fn", "--insecure"], env=_fork_env(), log=tmp_path / "log") as (target, _):
        result = asyncio.run(run_pipeline(grpc_runner(target, timeout=30), xr=xr, observed=provider_configs(xr)))
    lws = json_format.MessageToDict(result.desired.resources["leader-worker-set"].resource)
    assert lws["spec"]["forProvider"]["values"]["podSecurityContext"]["runAsUser"] == 65532
    assert "serving on" in (tmp_path / "log").read_text()
