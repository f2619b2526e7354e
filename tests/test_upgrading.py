"""UPGRADING.md is generated, current, and its comparison tells what a live cluster goes through."""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import pytest
import yaml

from function import stack as stacks
from function.bodies import USAGE_CONSUMER_LABEL
from function.compose import provider_config_usage_key
from function.model import Accelerator, Cloud
from function.values import deep_merge
from tests.support.parity import reference_source
from tests.support.repo import REPO
from upgrading import compare as upgrading

V031 = upgrading.load_yaml(upgrading.FACTS / "v0.3.1.yaml")


def test_upgrading_md_is_what_the_generator_writes() -> None:
    assert upgrading.OUT.read_text() == upgrading.generate(), (
        "UPGRADING.md is stale: run `.venv/bin/python -m upgrading` and commit it"
    )


def with_values(stack: stacks.Stack, key: str, values: dict[str, Any]) -> stacks.Stack:
    """The stack with ``values`` layered onto one component (a fresh Stack: renderers are cached per stack)."""
    comps = tuple(
        dataclasses.replace(c, values=deep_merge(c.values, values)) if c.key == key else c for c in stack.components
    )
    return dataclasses.replace(stack, components=comps)


def row(comparison: upgrading.Comparison, key: str) -> upgrading.Row:
    return next(r for r in comparison.rows if r.key == key)


def eks() -> stacks.Stack:
    loaded = stacks.load(Cloud.EKS, Accelerator.NVIDIA)
    assert loaded is not None
    return loaded


@pytest.mark.parametrize(
    ("override", "renamed"),
    [
        ({"fullnameOverride": "mp-cert-manager"}, None),  # v0.3.1's name kept
        ({"fullnameOverride": None, "nameOverride": None}, None),  # Helm's default: the release name
        ({"fullnameOverride": "cert-manager"}, "mp-cert-manager → cert-manager"),
        ({"fullnameOverride": None, "nameOverride": "cm"}, "mp-cert-manager → mp-cert-manager-cm"),
    ],
)
def test_renames_follow_the_naming_values_of_the_stack(override: dict[str, Any], renamed: str | None) -> None:
    got = row(upgrading.compare(with_values(eks(), "cert-manager", override), V031), "cert-manager")
    if renamed is None:
        assert upgrading.RENAMES not in got.changes
    else:
        assert upgrading.RENAMES in got.changes
        assert renamed in got.effect
        assert "invalid ownership metadata" in got.effect


def test_subchart_names_come_from_their_own_values_and_only_when_installed() -> None:
    release = "mp-kube-prometheus-stack"
    kept = {
        "kube-state-metrics": {"fullnameOverride": None},
        "prometheus-node-exporter": {"fullnameOverride": None},
    }
    got = row(upgrading.compare(with_values(eks(), "prometheus", kept), V031), "prometheus")
    assert upgrading.RENAMES not in got.changes, got.effect
    renamed = {"kube-state-metrics": {"fullnameOverride": "ksm"}}
    got = row(upgrading.compare(with_values(eks(), "prometheus", renamed), V031), "prometheus")
    assert f"{release}-kube-state-metrics → ksm" in got.effect
    # A subchart that is not installed names nothing.
    off = {"kubeStateMetrics": {"enabled": False}, "kube-state-metrics": {"fullnameOverride": "ksm"}}
    got = row(upgrading.compare(with_values(eks(), "prometheus", off), V031), "prometheus")
    assert "ksm" not in got.effect


def test_version_chart_added_and_removed_are_told_apart() -> None:
    comparison = upgrading.compare(eks(), V031)
    version = row(comparison, "leader-worker-set")
    assert version.changes == (upgrading.STAYS,)  # lws v0.8.0 both
    assert "Helm installs mp-gpu-operator" in row(comparison, "gpu-operator").effect
    # v0.3.1's own Usage key for the Envoy Gateway controller is replaced.
    assert row(comparison, "usage-envoy-gw-by-gateway-class").changes == (upgrading.REMOVED,)
    amd = stacks.load(Cloud.EXISTING, Accelerator.AMD)
    assert amd is not None
    removed = row(upgrading.compare(amd, V031), "dra-driver")
    assert removed.changes == (upgrading.REMOVED,)
    assert "Helm uninstalls mp-dra-driver-nvidia-gpu" in removed.effect


def test_every_v031_key_and_every_rendered_key_has_a_row() -> None:
    for cloud, accelerator in stacks.available():
        loaded = stacks.load(Cloud(cloud), Accelerator(accelerator))
        assert loaded is not None
        keys = {r.key for r in upgrading.compare(loaded, V031).rows}
        assert set(V031["components"]) <= keys
        assert set(V031["usages"]["keys"]) <= keys
        assert {c.key for c in loaded.components} <= keys


def test_the_provider_config_usages_continue_v031s() -> None:
    """Same keys and consumer label as v0.3.1's compose-usages: upgraded clusters keep their Usages."""
    facts = V031["usages"]["providerConfig"]
    assert facts["key"] == provider_config_usage_key("<key>")
    assert facts["consumerLabel"] == USAGE_CONSUMER_LABEL


def test_the_crossplane_minimum_is_the_packages_constraint() -> None:
    package = yaml.safe_load((REPO / "package" / "crossplane.yaml").read_text())
    minimum = upgrading.load_yaml(upgrading.FACTS / "control-plane.yaml")["crossplane"]["minimum"]
    assert package["spec"]["crossplane"]["version"] == f">={minimum}-0"


def test_parity_v031_facts_are_upstream_md_s_table() -> None:
    upstream = reference_source("UPSTREAM.md")
    rows = [
        [cell.strip() for cell in line.strip().strip("|").split("|")]
        for line in upstream.read_text().splitlines()
        if line.startswith("| ") and not line.startswith("| key") and not line.startswith("|---")
    ]
    table = {r[0]: r for r in rows}
    releases = {k: v for k, v in V031["components"].items() if v["kind"] == "Release"}
    for key, facts in releases.items():
        _, chart, repository, version, namespace, *_ = table[key]
        assert (chart, repository, version, namespace) == (
            facts["chart"],
            facts["repository"],
            facts["version"],
            facts["namespace"],
        ), key
    assert {k for k, r in table.items() if r[2].startswith(("http", "oci"))} == set(releases)
    objects = {k: v for k, v in V031["components"].items() if v["kind"] == "Object" and "name" in v}
    for key, facts in objects.items():
        described = table[key][1]
        assert facts["object"] in described and re.sub(r"[<>]", "", facts["name"]) in described.replace("`", ""), key
    gaie = table["gaie-crd-<crd name>"]
    crds = [k for k in V031["components"] if k.startswith("gaie-crd-")]
    assert gaie[1].startswith(f"{len(crds)} CRDs") and all(V031["components"][k]["version"] == gaie[3] for k in crds)
