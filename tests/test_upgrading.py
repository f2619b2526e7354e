"""UPGRADING.md is generated, current, and its comparison tells what a live cluster goes through."""

from __future__ import annotations

import dataclasses
import hashlib
import re
from typing import Any

import pytest
import yaml

from function import stack as stacks
from function.bodies import USAGE_CONSUMER_LABEL
from function.compose import provider_config_usage_key
from function.model import Accelerator, Cloud, StackKind
from function.values import deep_merge
from tests.support.parity import chart_repositories, reference_source
from tests.support.repo import REPO
from upgrading import compare as upgrading
from upgrading import refresh
from upgrading.objects import CRDS_DIR, HOOK, TEMPLATE, Identity, compare_objects

V031 = upgrading.load_yaml(upgrading.FACTS / "v0.3.1.yaml")
PR406 = upgrading.load_yaml(upgrading.FACTS / "pr406-dynamo.yaml")


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
        ({"fullnameOverride": "mp-cert-manager"}, None),  # v0.3.1's names kept
        ({"fullnameOverride": ""}, None),  # Helm's default: the release name
        ({"fullnameOverride": "cert-manager"}, ("mp-cert-manager", "cert-manager")),
        ({"fullnameOverride": "", "nameOverride": "cm"}, ("mp-cert-manager", "mp-cert-manager-cm")),
    ],
)
def test_renames_are_what_helm_renders_for_the_stacks_values(
    override: dict[str, Any], renamed: tuple[str, str] | None
) -> None:
    got = row(upgrading.compare(with_values(eks(), "cert-manager", override), V031), "cert-manager")
    assert got.objects is not None
    if renamed is None:
        assert upgrading.RENAMES not in got.changes
        assert not got.objects.renamed
        return
    assert upgrading.RENAMES in got.changes
    old, new = renamed
    pairs = {(o.kind, o.namespace, o.name): n.name for o, n in got.objects.renamed}
    # Every object of the chart is renamed, each to its own new name: the deployment, its webhook, ...
    assert pairs[("Deployment", "cert-manager", old)] == new
    assert pairs[("Deployment", "cert-manager", f"{old}-webhook")] == f"{new}-webhook"
    assert pairs[("MutatingWebhookConfiguration", "", f"{old}-webhook")] == f"{new}-webhook"
    assert len(pairs) == len(got.objects.old) - len(got.objects.removed)
    assert all(o.file == n.file and o.kind == n.kind for o, n in got.objects.renamed)
    assert f"{len(pairs)} renamed" in got.effect


def test_subchart_objects_follow_their_own_values_and_only_when_installed() -> None:
    release = "mp-kube-prometheus-stack"
    renamed = {"kube-state-metrics": {"fullnameOverride": "ksm"}}
    got = row(upgrading.compare(with_values(eks(), "prometheus", renamed), V031), "prometheus").objects
    assert got is not None
    assert {(o.kind, o.name, n.name) for o, n in got.renamed} >= {
        ("Deployment", f"{release}-kube-state-metrics", "ksm"),
        ("ClusterRole", f"{release}-kube-state-metrics", "ksm"),
    }
    assert all(o.file.startswith("charts/kube-state-metrics/") for o, _ in got.renamed)
    # A subchart that is not installed renders nothing: its objects are removed, none renamed.
    off = {"kubeStateMetrics": {"enabled": False}, "kube-state-metrics": {"fullnameOverride": "ksm"}}
    got = row(upgrading.compare(with_values(eks(), "prometheus", off), V031), "prometheus").objects
    assert got is not None
    assert not got.renamed
    assert ("Deployment", "monitoring", f"{release}-kube-state-metrics") in {o.key for o in got.removed}
    assert not any("ksm" in n.name for n in got.added)


@pytest.mark.parametrize(("cloud", "accelerator", "kind"), stacks.available())
def test_every_stack_keeps_the_object_names_of_the_release_its_clusters_run(
    cloud: str, accelerator: str, kind: str
) -> None:
    """No continuing Release renames or removes an object: Standard keeps v0.3.1's names, Dynamo PR #406's."""
    loaded = stacks.load(Cloud(cloud), Accelerator(accelerator), StackKind(kind))
    assert loaded is not None
    before = V031 if kind == "Standard" else PR406
    for r in upgrading.compare(loaded, before).rows:
        assert r.objects is None or not r.objects.renamed, (r.key, r.objects and r.objects.renamed[:3])
        assert r.objects is None or not r.objects.removed, (r.key, r.objects and r.objects.removed[:3])


def test_the_v031_objects_are_facts_v031s_releases() -> None:
    """facts/v0.3.1-objects.yaml renders every Release of facts/v0.3.1.yaml, under v0.3.1's release and namespace."""
    recorded = upgrading.load_yaml(upgrading.V031_OBJECTS)
    releases = {k: c for k, c in V031["components"].items() if c["kind"] == "Release"}
    assert set(recorded["releases"]) == set(releases)
    for key, comp in releases.items():
        got = recorded["releases"][key]
        assert got["chart"] == f"{comp['chart']}-{comp['version']}.tgz" and got["chart"] in recorded["charts"]
        assert (got["release"], got["namespace"]) == (f"mp-{comp['chart']}", comp["namespace"])
        assert got["objects"], key
    for name, chart in recorded["charts"].items():
        if "package" in chart:  # today's package, the same bytes
            assert hashlib.sha256((REPO / chart["package"]).read_bytes()).hexdigest() == chart["sha256"], name


def test_parity_the_v031_objects_are_what_helm_renders_from_the_sources() -> None:
    sources = chart_repositories(c["source"]["repository"] for c in V031["components"].values() if "source" in c)
    assert refresh.OBJECTS.read_text() == refresh.generate(sources), (
        "facts/v0.3.1-objects.yaml is stale: run `.venv/bin/python -m upgrading.refresh` and commit it"
    )


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
    for loaded in stacks.every():
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


def obj(kind: str, name: str, file: str, **where: Any) -> Identity:
    """An object of kind and name from a file; ``where``: its namespace, hook, crds_dir."""
    return dataclasses.replace(Identity(kind, "", name, file), **where)


def test_a_rename_pairs_the_most_alike_names_of_one_template() -> None:
    rbac = "templates/rbac.yaml"
    old = [obj("ClusterRole", f"mp-x-{n}", rbac) for n in ("view", "edit", "controller")]
    new = [obj("ClusterRole", f"x-{n}", rbac) for n in ("view", "edit", "controller", "extra")]
    got = compare_objects([*old, obj("ConfigMap", "a", "templates/cm.yaml", namespace="ns")], new)
    assert {(o.name, n.name) for o, n in got.renamed} == {
        ("mp-x-view", "x-view"),
        ("mp-x-edit", "x-edit"),
        ("mp-x-controller", "x-controller"),
    }
    assert [str(o) for o in got.added] == ["ClusterRole x-extra"]
    assert [str(o) for o in got.removed] == ["ConfigMap ns/a"]  # another kind: never a rename


def test_the_same_object_elsewhere_is_moved_not_kept() -> None:
    crd = ("CustomResourceDefinition", "xs.example.com")
    got = compare_objects(
        [obj(*crd, "crds/xs.yaml", crds_dir=True), obj("Job", "j", "templates/job.yaml", namespace="ns")],
        [obj(*crd, "templates/crds.yaml"), obj("Job", "j", "templates/job.yaml", namespace="ns", hook="pre-upgrade")],
    )
    assert not got.same and not got.renamed and not got.removed and not got.added
    assert [(o.placement, n.placement) for o, n in got.moved] == [(CRDS_DIR, TEMPLATE), (TEMPLATE, HOOK)]


def test_upgrading_md_tells_what_helm_does_with_each_difference() -> None:
    """A deleted CRD takes its objects with it; crds/ is never installed by an upgrade; a move says its effect."""
    crd = obj("CustomResourceDefinition", "xs.example.com", "templates/crds.yaml")
    in_crds_dir = obj("CustomResourceDefinition", "ys.example.com", "crds/ys.yaml", crds_dir=True)
    job = obj("Job", "j", "templates/job.yaml", namespace="ns")
    diff = compare_objects([crd, job], [in_crds_dir, dataclasses.replace(job, hook="post-install")])
    text = "\n".join(upgrading.objects_lines("k", diff))
    assert "removed: Helm deletes them; a deleted CRD takes every object of its kind with it" in text
    assert "CustomResourceDefinition xs.example.com (templates/crds.yaml)" in text
    assert "added in crds/: the upgrade does not install them" in text
    assert "moved, Job ns/j (templates/job.yaml → templates/job.yaml, hook post-install)" in text
