"""The Dynamo stack (spec.stack: Dynamo): fixed once set, and continuous with Modelplane PR #406's clusters.

PR #406's Dynamo stack as its function composes it is ``facts/pr406-dynamo.yaml``
(read by running that commit's function on its own test fixture; the file
names the commit). Every generated Dynamo stack is compared with it here:
keys, release names, namespaces, object names, Queue hierarchy, the labels its
Usages select on, the ModelExpress Service and readiness.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

import pytest
import yaml

from function import stack
from function.bodies import EXTERNAL_NAME, RESOURCE_LABEL
from function.model import Accelerator, Cloud, StackKind
from function.stack import to_data
from function.values import deep_merge
from tests.support.cel_rules import TRANSITION_RULES
from tests.support.charts import CHARTS, inventory
from tests.support.crossplane import desired, render
from tests.support.overrides import STACKS, fatal, messages, overridden
from tests.support.parity import reference_source
from tests.support.repo import EXAMPLE, REPO, load_docs
from tests.support.serve import Invoke
from tests.support.xr import XRD, make_xr, observed_as, provider_configs

PR406 = yaml.safe_load((REPO / "facts" / "pr406-dynamo.yaml").read_text())
EXTRA = REPO / "facts" / "extra-manifests"
BANK_EXAMPLE = EXAMPLE / "environmentconfigs" / "regulated-bank.yaml"
DAY0 = EXAMPLE / "dynamo"  # the Dynamo examples: two ServingStacks, the staged Grove/KAI documents
DYNAMO = [(c, a) for c, a, k in STACKS if k == StackKind.DYNAMO]
# The keys only the Dynamo stack has: what PR #406 composes there in LeaderWorkerSet's place.
GANG_BACKEND = {
    "grove",
    "kai-scheduler",
    "kai-queue-root",
    "kai-queue",
    "modelexpress-crd-modelcacheentries.modelexpress.nvidia.com",
    "modelexpress-crd-modelmetadatas.modelexpress.nvidia.com",
    "modelexpress-server-sa",
    "modelexpress-server-role",
    "modelexpress-server-rolebinding",
    "modelexpress-server-svc",
    "modelexpress-server",
}


def _stack(cloud: str, accelerator: str, kind: StackKind) -> stack.Stack:
    loaded = stack.load(Cloud(cloud), Accelerator(accelerator), kind)
    assert loaded is not None
    return loaded


def test_every_nvidia_stack_has_a_dynamo_variant_and_amd_none() -> None:
    nvidia = {(c, a) for c, a, k in STACKS if a == "NVIDIA" and k == StackKind.STANDARD}
    assert set(DYNAMO) == nvidia
    assert fatal(make_xr("Vultr", "AMD", stack="Dynamo")).endswith(
        "spec.stack: no Dynamo stack for Vultr/AMD; stacks exist for " + stack.existing()
    )


@pytest.mark.parametrize(("cloud", "accelerator"), DYNAMO)
def test_the_dynamo_stack_is_the_standard_one_with_the_gang_backend_swapped(cloud: str, accelerator: str) -> None:
    standard = {c.key: c for c in _stack(cloud, accelerator, StackKind.STANDARD).components}
    dynamo = {c.key: c for c in _stack(cloud, accelerator, StackKind.DYNAMO).components}
    assert set(standard) - set(dynamo) == {"leader-worker-set"}
    assert set(dynamo) - set(standard) == GANG_BACKEND
    # Everything else is the Standard stack's, field for field (PR #406 composes the common part alike).
    assert [k for k in dynamo if k in standard and to_data(dynamo[k]) != to_data(standard[k])] == []


@pytest.mark.parametrize(("cloud", "accelerator"), DYNAMO)
def test_pr406_keys_release_names_namespaces_and_objects_stay(cloud: str, accelerator: str) -> None:
    xr = make_xr(cloud, accelerator, stack="Dynamo")
    got = desired(render(xr))
    for key, old in PR406["components"].items():
        assert key in got, key
        body = got[key]
        assert body["kind"] == old["kind"], key
        if old["kind"] == "Release":
            # Release name and namespace: Helm can move neither.
            assert body["metadata"]["annotations"][EXTERNAL_NAME] == f"mp-{old['chart']}", key
            assert body["spec"]["forProvider"]["namespace"] == old["namespace"], key
            continue
        manifest = body["spec"]["forProvider"]["manifest"]
        # As UPGRADING.md reads the facts: a GAIE CRD is named by its key.
        name = old.get("name") or key.removeprefix("gaie-crd-")
        name = xr["spec"]["gateway"]["className"] if name.startswith("<") else name
        meta = manifest["metadata"]
        assert (manifest["kind"], meta.get("name"), meta.get("namespace")) == (
            old["object"],
            name,
            old.get("namespace"),
        )
    # The gang backend is PR #406's to the version: same charts, no other effective values.
    for key in ("grove", "kai-scheduler"):
        old, spec = PR406["components"][key], got[key]["spec"]["forProvider"]
        assert spec["chart"] == {"name": old["chart"], "repository": old["repository"], "version": old["version"]}
        chart = inventory(old["chart"])["values"]
        assert deep_merge(chart, spec.get("values") or {}) == chart, key
    for key, manifest in PR406["manifests"].items():
        assert got[key]["spec"]["forProvider"]["manifest"] == manifest, key
    crds = {d["metadata"]["name"]: d for d in load_docs(EXTRA / "modelexpress-crds.yaml")}
    for key in (k for k in GANG_BACKEND if k.startswith("modelexpress-crd-")):
        assert got[key]["spec"]["forProvider"]["manifest"] == crds[key.removeprefix("modelexpress-crd-")]
    for key, value in PR406["resourceLabels"].items():
        assert got[key]["metadata"]["labels"][RESOURCE_LABEL] == value
    for key, readiness in PR406["readiness"].items():
        assert got[key]["spec"]["readiness"] == readiness


@pytest.mark.parametrize(("cloud", "accelerator"), DYNAMO)
def test_kai_is_held_until_both_queues_are_gone_as_pr406_holds_it(cloud: str, accelerator: str) -> None:
    got = desired(render(make_xr(cloud, accelerator, stack="Dynamo")))
    for queue in ("kai-queue-root", "kai-queue"):
        spec = got[f"usage-kai-scheduler-by-{queue}"]["spec"]
        assert spec["replayDeletion"] is True
        assert spec["of"]["kind"] == "Release"
        assert spec["of"]["resourceSelector"] == {
            "matchControllerRef": True,
            "matchLabels": {RESOURCE_LABEL: "kai-scheduler"},
        }
        assert spec["by"]["resourceSelector"] == {"matchControllerRef": True, "matchLabels": {RESOURCE_LABEL: queue}}
    # The Queue hierarchy compose-model-replica's pods name.
    contract = PR406["contracts"]["queue"]
    queue = got["kai-queue"]["spec"]["forProvider"]["manifest"]
    assert (queue["metadata"]["name"], queue["spec"]["parentQueue"]) == (contract["name"], contract["parent"])
    service = got["modelexpress-server-svc"]["spec"]["forProvider"]["manifest"]
    contract = PR406["contracts"]["modelExpressService"]
    assert (service["metadata"]["name"], service["metadata"]["namespace"], service["spec"]["ports"][0]["port"]) == (
        contract["name"],
        contract["namespace"],
        contract["port"],
    )


def test_nothing_remote_is_composed_before_the_provider_configs_exist() -> None:
    result = render(make_xr("GKE", stack="Dynamo"), observed=[])
    assert set(desired(result)) == {"provider-config-helm", "provider-config-kubernetes"}


def test_pr406_facts_match_the_reference_tables() -> None:
    # UPSTREAM-DYNAMO.md section 2.3: key, kind, chart, repository, version (default), namespace, values, external-name.
    text = reference_source("UPSTREAM-DYNAMO.md").read_text()
    rows = [
        [c.strip().strip("`") for c in line.strip().strip("|").split("|")]
        for line in text.split("### 2.3", 1)[1].split("\n### ", 1)[0].splitlines()
        if line.startswith("| `")
    ]
    releases = {r[0]: r for r in rows if r[1] == "Release"}
    assert set(releases) == {"grove", "kai-scheduler"}
    for key, row in releases.items():
        old = PR406["components"][key]
        assert (row[2], row[3], row[5], row[7]) == (
            old["chart"],
            old["repository"],
            old["namespace"],
            f"mp-{old['chart']}",
        )
        assert f"(`{old['version']}`)" in row[4]
    objects = {r[0] for r in rows if r[1] == "Object"}
    assert objects == {k for k, v in PR406["components"].items() if v["kind"] == "Object" and k in GANG_BACKEND}
    assert {r[0] for r in rows if r[1].startswith("Usage")} <= set(PR406["usages"]["keys"])


def test_extra_manifests_are_the_copies_their_sources_name() -> None:
    sources = yaml.safe_load((EXTRA / "SOURCES.yaml").read_text())
    for name, source in sources.items():
        assert hashlib.sha256((EXTRA / name).read_bytes()).hexdigest() == source["sha256"], name


# --------------------------------------------------------------------------- spec.stack is fixed once set


def _stack_schema() -> dict[str, Any]:
    schema: dict[str, Any] = XRD["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    field: dict[str, Any] = schema["properties"]["stack"]
    return field


def test_the_xrd_refuses_to_switch_the_stack() -> None:
    field = _stack_schema()
    assert (field["enum"], field["default"]) == (["Standard", "Dynamo"], "Standard")
    [rule] = field["x-kubernetes-validations"]
    check = TRANSITION_RULES[rule["rule"]]
    assert not check("Dynamo", "Standard")
    assert not check("Standard", "Dynamo")
    assert check("Dynamo", "Dynamo")
    assert "recreate the cluster" in rule["message"]


def _observed_key(key: str) -> dict[str, Any]:
    return observed_as(key, {"apiVersion": "helm.m.crossplane.io/v1beta1", "kind": "Release", "metadata": {}})


@pytest.mark.parametrize(
    ("kind", "other", "key"),
    [("Dynamo", "Standard", "leader-worker-set"), ("Standard", "Dynamo", "grove"), ("Standard", "Dynamo", "kai-queue")],
)
def test_the_function_refuses_a_stack_over_the_other_stacks_components(kind: str, other: str, key: str) -> None:
    xr = make_xr("EKS", stack=kind)
    message = fatal(xr, observed=[*provider_configs(xr), _observed_key(key)])
    assert message.endswith(
        f"spec.stack: {kind}, but the cluster runs the {other} stack ({key} observed); spec.stack cannot change on a "
        f"live cluster: set it back to {other}, or recreate the cluster to change its serving stack"
    )


def test_a_stack_over_its_own_components_renders() -> None:
    xr = make_xr("EKS", stack="Dynamo")
    assert "grove" in desired(render(xr, observed=[*provider_configs(xr), _observed_key("grove")]))


# --------------------------------------------------------------------------- PR #406's ServingStacks


def _pr406_xr(**pins: dict[str, str]) -> dict[str, Any]:
    """A ServingStack as PR #406's InferenceCluster writes it on GKE, its XRD's defaults stored."""
    xr = make_xr("GKE", stack="Dynamo")
    del xr["spec"]["cloud"]
    xr["spec"]["nvidiaDriverRoot"] = "/home/kubernetes/bin/nvidia"
    xr["spec"].update(PR406["servingStack"]["pinDefaults"])
    for group, values in pins.items():
        xr["spec"][group] = {**xr["spec"][group], **values}
    return xr


def test_a_pr406_serving_stack_gets_the_dynamo_stack() -> None:
    result = render(_pr406_xr())
    got = desired(result)
    assert "grove" in got and "leader-worker-set" not in got
    assert any("spec.cloud is not set" in m for m in messages(result))


@pytest.mark.parametrize(
    ("group", "field", "pin", "hold"),
    [
        ("dynamo", "grove", "v0.1.0-alpha.7", "servingStack.components.grove.version"),
        ("dynamo", "kaiScheduler", "v0.17.0", "servingStack.components.kai-scheduler.version"),
        ("dynamo", "modelExpress", "0.5.0", "servingStack.components.modelexpress-server.manifest"),
        ("standard", "leaderWorkerSet", "v0.7.0", "servingStack.components.leader-worker-set.version"),
    ],
)
def test_a_pr406_pin_other_than_its_default_is_a_fatal_pointing_to_a_hold(
    group: str, field: str, pin: str, hold: str
) -> None:
    message = fatal(_pr406_xr(**{group: {field: pin}}))
    assert f"spec.{group}.{field}: {pin} differs from Modelplane PR #406's default" in message
    assert hold in message


# --------------------------------------------------------------------------- day 0: staged Grove and KAI


STAGED = [
    *load_docs(DAY0 / "dynamo-dev-next.yaml"),
    *load_docs(DAY0 / "dynamo-prod-hold.yaml"),
]


def _charts(result: Any) -> dict[str, str]:
    got = desired(result)
    return {k: got[k]["spec"]["forProvider"]["chart"]["version"] for k in ("grove", "kai-scheduler")}


def test_dev_moves_grove_and_kai_together_and_prod_holds_with_a_warning() -> None:
    dev = overridden(load_docs(DAY0 / "xr-dynamo-dev.yaml")[0], *STAGED)
    assert _charts(dev) == {"grove": "v0.1.0-alpha.7", "kai-scheduler": "v0.17.0"}
    prod = overridden(load_docs(DAY0 / "xr-dynamo.yaml")[0], *STAGED)
    assert _charts(prod) == {"grove": "v0.1.0-alpha.6", "kai-scheduler": "v0.16.8"}
    redundant = [m for m in messages(prod) if re.search(r"is the generated version already", m)]
    assert len(redundant) == 2 and all("dynamo-prod-hold" in m for m in redundant)
    # A Standard cluster in prod is untouched: the document's components are skipped, saying so.
    standard = overridden(make_xr("GKE"), *STAGED)
    assert any("has no grove" in m for m in messages(standard))


# --------------------------------------------------------------------------- images, validate


def test_images_lists_every_kai_image_with_its_upstream_source(invoke: Invoke) -> None:
    # Every KAI image takes global.registry: each is listed with the reference before the mirror moved it.
    out = invoke("images", "--xr", "example/dynamo/xr-dynamo.yaml", "-e", str(BANK_EXAMPLE), "--format", "pairs")
    assert out.exit_code == 0, out.output
    kai = {line.split(" -> ")[0] for line in out.stdout.splitlines() if "/kai-scheduler/kai-scheduler/" in line}
    names = {img.repository and img.default["repository"] for img in CHARTS["kai-scheduler"].images}
    assert kai == {f"image ghcr.io/kai-scheduler/kai-scheduler/{n}:v0.16.8" for n in names}
    assert "image nvcr.io/nvidia/ai-dynamo/modelexpress-server:0.4.1" in {
        line.split(" -> ")[0] for line in out.stdout.splitlines()
    }


def test_validate_warns_of_the_prod_holds_on_a_dynamo_cluster(invoke: Invoke) -> None:
    out = invoke("validate", "-e", "example/dynamo/", "--xr", "example/dynamo/xr-dynamo.yaml")
    assert out.exit_code == 0, out.output
    assert out.stderr.endswith("against 1 ServingStacks: 0 fatal, 2 warnings\n")


def test_explain_names_the_document_that_moved_grove_and_kai(invoke: Invoke) -> None:
    out = invoke("explain", "example/dynamo/xr-dynamo-dev.yaml", "-e", "example/dynamo/", "-O", "yaml")
    assert out.exit_code == 0, out.output
    data = yaml.safe_load(out.stdout)
    assert data["stack"] == "gke-nvidia-dynamo"
    fields = {c["name"]: c["fields"] for c in data["components"]}
    assert {"path": "chart.version", "value": "v0.1.0-alpha.7", "from": "dynamo-dev-next"} in fields["grove"]
    assert {"path": "chart.version", "value": "v0.17.0", "from": "dynamo-dev-next"} in fields["kai-scheduler"]
