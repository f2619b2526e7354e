"""Registry mirrors: chart and image rewriting, pull secrets, strict mode."""

from __future__ import annotations

import copy
import dataclasses
import re
from collections.abc import Iterator
from typing import Any

import pytest
from pydantic import ValidationError

from function import generated, stack
from function.errors import InputError
from function.model import Accelerator, Cloud, StackKind
from function.overrides import Collected, plan, strict
from function.overrides.document import Document, OverrideDocument
from function.overrides.images import pod_containers, qualify, split_reference
from function.overrides.registry import Rule, Rules, chart_repository, rewrite_image_name
from function.paths import get_path
from function.stack import ChartRef, Component, ImageRef
from tests.support.crossplane import desired, render
from tests.support.overrides import PAIRS, STACKS, ec, fatal, mirror_all, overridden
from tests.support.xr import make_xr

MIRROR = "mirror.example.com/hub"
CHART_MIRROR = "oci://mirror.example.com/charts"


# --------------------------------------------------------------------------- #
# Reference parsing and rule matching
# --------------------------------------------------------------------------- #


@pytest.mark.parametrize(
    ("ref", "name", "suffix"),
    [
        ("quay.io/prometheus/prometheus:v3.5.0", "quay.io/prometheus/prometheus", ":v3.5.0"),
        ("localhost:5000/a/b", "localhost:5000/a/b", ""),
        ("localhost:5000/a/b:1", "localhost:5000/a/b", ":1"),
        ("gke.gcr.io/pause:3.8@sha256:" + "a" * 64, "gke.gcr.io/pause", ":3.8@sha256:" + "a" * 64),
        ("gcr.io/x/y@sha256:" + "b" * 64, "gcr.io/x/y", "@sha256:" + "b" * 64),
        ("ubuntu", "ubuntu", ""),
    ],
)
def test_split_reference(ref: str, name: str, suffix: str) -> None:
    assert split_reference(ref) == (name, suffix)


@pytest.mark.parametrize(
    ("name", "qualified"),
    [
        ("ubuntu", "docker.io/library/ubuntu"),
        ("pytorch/pytorch", "docker.io/pytorch/pytorch"),
        ("bitnami/kubectl", "docker.io/bitnami/kubectl"),
        ("docker.io/busybox", "docker.io/library/busybox"),
        ("quay.io/jetstack/cert-manager-controller", "quay.io/jetstack/cert-manager-controller"),
        ("localhost/x", "localhost/x"),
    ],
)
def test_short_docker_hub_names_are_made_explicit(name: str, qualified: str) -> None:
    assert qualify(name) == qualified


RULES = Rules.of(
    [
        Rule("nvcr.io", "m.example.com/nvcr", "a"),
        Rule("nvcr.io/nvidia/cloud-native", "m.example.com/nvcr-cn", "a"),
        Rule("*", "m.example.com/hub", "b"),
    ]
)


@pytest.mark.parametrize(
    ("name", "rewritten"),
    [
        ("nvcr.io/nvidia/gpu-operator", "m.example.com/nvcr/nvidia/gpu-operator"),
        ("nvcr.io/nvidia/cloud-native/dcgm", "m.example.com/nvcr-cn/dcgm"),  # longest prefix wins
        ("nvcr.iox/evil/image", "m.example.com/hub/evil/image"),  # whole segments only
        ("quay.io/prometheus/prometheus", "m.example.com/hub/prometheus/prometheus"),  # "*" replaces the host
        ("m.example.com/nvcr/nvidia/driver", None),  # already mirrored: untouched
    ],
)
def test_image_rules(name: str, rewritten: str | None) -> None:
    got = rewrite_image_name(RULES, name)
    assert (got.value if got else None) == rewritten


def test_chart_rules_keep_the_path_and_prefer_the_longest_prefix() -> None:
    rules = Rules.of(
        [
            Rule("https://charts.jetstack.io", "oci://m.example.com/jetstack", "a"),
            Rule("oci://registry.k8s.io", "oci://m.example.com/k8s", "a"),
            Rule("*", "oci://m.example.com/charts", "a"),
        ]
    )

    def target(repository: str) -> str | None:
        got = rules.rewrite(*chart_repository(repository))
        return got.value if got else None

    assert target("https://charts.jetstack.io/") == "oci://m.example.com/jetstack"
    assert target("oci://registry.k8s.io/lws/charts") == "oci://m.example.com/k8s/lws/charts"
    got = rules.rewrite(*chart_repository("https://helm.ngc.nvidia.com/nvidia"))
    assert got is not None and got.value == "oci://m.example.com/charts/nvidia"
    assert rules.rewrite(*chart_repository("oci://m.example.com/charts/nvidia")) is None


# --------------------------------------------------------------------------- #
# On the generated stacks
# --------------------------------------------------------------------------- #


def _strings(node: Any, path: str = "") -> Iterator[tuple[str, str]]:
    if isinstance(node, str):
        yield path, node
    elif isinstance(node, dict):
        for k, v in node.items():
            yield from _strings(v, f"{path}.{k}")
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _strings(v, f"{path}[{i}]")


def _hosts_of_generated(module: str) -> set[str]:
    """Every registry and chart repository host in a generated module, read from its data, not via the layer."""
    data = __import__(f"function.generated.{module}", fromlist=["STACK"]).STACK
    hosts = {"docker.io", "quay.io", "ghcr.io", "nvcr.io", "registry.k8s.io", "gcr.io"}
    refs: list[str] = []
    for c in data["components"]:
        if "chart" in c:
            hosts.add(c["chart"]["repository"].split("://", 1)[1].split("/", 1)[0])
        for img in c.get("images", ()):
            refs += [v for v in img.get("default", {}).values() if v]
        refs += [
            v for p, v in _strings(c.get("manifest", {})) if re.search(r"(containers|initContainers)\[\d+\]\.image$", p)
        ]
    for img in data["driver"].get("images", ()):
        refs += [v for v in img.get("default", {}).values() if v]
    for ref in refs:
        first = ref.split("/", 1)[0]
        if "/" in ref and ("." in first or ":" in first):
            hosts.add(first)
    return hosts


def _upstream_references(obj: Any, hosts: set[str]) -> list[str]:
    pattern = re.compile(
        r"(?:(?<=://)|(?<![\w./:@-]))(?:" + "|".join(re.escape(h) for h in hosts) + r")(?![\w.-])", re.IGNORECASE
    )
    return [f"{p}: {s}" for p, s in _strings(obj) if pattern.search(s)]


@pytest.mark.parametrize(("cloud", "accelerator", "kind"), STACKS)
def test_strict_catch_all_leaves_no_upstream_reference_anywhere(cloud: str, accelerator: str, kind: str) -> None:
    xr = make_xr(cloud, accelerator, stack=kind)
    module = stack.module_name(cloud, accelerator, kind)
    hosts = _hosts_of_generated(module)
    # Without the mirror the stack is full of upstream references: the scan works.
    assert _upstream_references(desired(render(xr)), hosts)
    result = overridden(xr, ec("mirror", mirror_all()))
    got = desired(result)
    assert _upstream_references(got, hosts) == []
    for key, body in got.items():
        if body["kind"] == "Release":
            assert (
                body["spec"]["forProvider"]["chart"]["repository"].startswith(CHART_MIRROR + "/")
                or body["spec"]["forProvider"]["chart"]["repository"] == CHART_MIRROR
            ), key


@pytest.mark.parametrize(("cloud", "accelerator", "kind"), STACKS)
def test_every_declared_image_is_written_explicitly_to_the_mirror(cloud: str, accelerator: str, kind: str) -> None:
    chosen = stack.load(Cloud(cloud), Accelerator(accelerator), StackKind(kind))
    assert chosen is not None
    got = desired(overridden(make_xr(cloud, accelerator, stack=kind), ec("mirror", mirror_all(strict=False))))
    checked = 0
    for c in chosen.components:
        if not c.images:
            continue
        for_provider = got[c.key]["spec"]["forProvider"]
        values = for_provider["values"] if c.is_release else for_provider["manifest"]
        for img in c.images:
            known = {k: v for k, v in {**img.builtin, **img.default}.items() if v}
            if img.ref and (known.get("ref") or get_path(c.values if c.is_release else c.manifest, img.ref)):
                assert get_path(values, img.ref).startswith(MIRROR + "/"), (c.key, img.name)
            elif img.repository and (known.get("repository") or get_path(c.values, img.repository)):
                registry = get_path(values, img.registry) if img.registry else None
                repository = get_path(values, img.repository)
                full = f"{registry}/{repository}" if registry else repository
                assert full.startswith(MIRROR + "/"), (c.key, img.name, full)
            else:
                continue
            checked += 1
    assert checked >= 10


def test_registry_and_repository_split_keeps_the_repository_name() -> None:
    got = desired(overridden(make_xr("GKE"), ec("mirror", mirror_all(strict=False))))
    image = got["prometheus"]["spec"]["forProvider"]["values"]["prometheus"]["prometheusSpec"]["image"]
    assert image["registry"] == MIRROR and image["repository"] == "prometheus/prometheus"
    # A chart with a registry key left unset and a full repository: the repository alone.
    cm = got["cert-manager"]["spec"]["forProvider"]["values"]["image"]
    assert cm == {"repository": MIRROR + "/jetstack/cert-manager-controller"}
    # GPU Operator operands: {repository}/{image}:{version}.
    dcgm = got["gpu-operator"]["spec"]["forProvider"]["values"]["dcgmExporter"]
    assert (dcgm["repository"], dcgm["image"]) == (MIRROR + "/nvidia/k8s", "dcgm-exporter")


def test_chart_sources_are_rewritten_keeping_name_and_version() -> None:
    xr = make_xr("GKE")
    before = desired(render(xr))
    doc = {
        "registry": {
            "charts": [
                {"from": "https://charts.jetstack.io", "to": "oci://m.example.com/jetstack"},
                {"from": "oci://docker.io/envoyproxy", "to": "oci://m.example.com/envoy"},
            ]
        }
    }
    got = desired(overridden(xr, ec("charts", doc)))
    for key, repository in (
        ("cert-manager", "oci://m.example.com/jetstack"),
        ("envoy-gateway", "oci://m.example.com/envoy"),
    ):
        chart = got[key]["spec"]["forProvider"]["chart"]
        assert chart == {**before[key]["spec"]["forProvider"]["chart"], "repository": repository}
    # No rule for it: unchanged.
    assert got["prometheus"]["spec"]["forProvider"]["chart"] == before["prometheus"]["spec"]["forProvider"]["chart"]


def test_chart_pull_secret_goes_only_to_charts_pulled_from_the_mirror() -> None:
    doc = {
        "registry": {
            "charts": [{"from": "https://charts.jetstack.io", "to": "oci://m.example.com/jetstack"}],
            "chartPullSecretRef": {"name": "mirror-creds"},
        }
    }
    got = desired(overridden(make_xr("GKE"), ec("charts", doc)))
    assert got["cert-manager"]["spec"]["forProvider"]["chart"]["pullSecretRef"] == {"name": "mirror-creds"}
    assert "pullSecretRef" not in got["prometheus"]["spec"]["forProvider"]["chart"]


def test_image_pull_secrets_in_the_shape_each_chart_takes() -> None:
    doc = {"registry": {"imagePullSecrets": ["mirror-pull"]}}
    got = desired(overridden(make_xr("Existing"), ec("secrets", doc)))
    cm = got["cert-manager"]["spec"]["forProvider"]["values"]
    assert cm["global"]["imagePullSecrets"] == [{"name": "mirror-pull"}]
    gpu = got["gpu-operator"]["spec"]["forProvider"]["values"]
    assert gpu["operator"]["imagePullSecrets"] == ["mirror-pull"]  # plain names
    assert gpu["node-feature-discovery"]["imagePullSecrets"] == [{"name": "mirror-pull"}]
    amd = desired(overridden(make_xr("Existing", "AMD"), ec("secrets", doc)))["amd-gpu-operator"]
    assert amd["spec"]["forProvider"]["values"]["controllerManager"]["manager"]["imagePullSecrets"] == "mirror-pull"


def test_strict_lists_every_reference_still_upstream() -> None:
    doc = {"registry": {"images": [{"from": "nvcr.io", "to": "m.example.com/nvcr"}], "strict": True}}
    message = fatal(make_xr("GKE"), ec("bank", doc))
    assert "EnvironmentConfig bank: data.servingStack.registry.strict" in message
    for expected in (
        "cert-manager image controller: quay.io/jetstack/cert-manager-controller",
        "prometheus image prometheus: quay.io/prometheus/prometheus",
        "envoy-gateway chart: oci://docker.io/envoyproxy",
        "gpu-operator chart: https://helm.ngc.nvidia.com/nvidia",
    ):
        assert expected in message
    assert "nvcr.io/nvidia/gpu-operator" not in message  # mirrored by the nvcr.io rule


def test_strict_is_sticky_across_documents() -> None:
    later = ec("team", {"priority": 99, "registry": {"strict": False}})
    message = fatal(make_xr("GKE"), ec("bank", {"registry": {"strict": True}}), later)
    assert "EnvironmentConfig bank: data.servingStack.registry.strict:" in message


def test_strict_refuses_an_image_whose_registry_is_not_known() -> None:
    base = stack.load(Cloud.GKE, Accelerator.NVIDIA)
    assert base is not None
    unknown = ImageRef(name="mystery", repository="mystery.image.repository", default={"repository": None})
    comps = tuple(
        dataclasses.replace(c, images=(*c.images, unknown)) if c.key == "cert-manager" else c for c in base.components
    )
    with pytest.raises(InputError, match="cert-manager image mystery: no value and no recorded default"):
        plan(dataclasses.replace(base, components=comps), Collected(documents=tuple(_document(mirror_all()))))


# --------------------------------------------------------------------------- #
# Shapes no generated stack has today: prefix-only registries and pod templates
# --------------------------------------------------------------------------- #


def _document(doc: dict[str, Any]) -> list[Document]:
    return [Document("doc", "EnvironmentConfig doc: data.servingStack", OverrideDocument.model_validate(doc), b"x")]


def _synthetic() -> stack.Stack:
    base = stack.load(Cloud.GKE, Accelerator.NVIDIA)
    assert base is not None
    scheduler = Component(
        key="kai-scheduler",
        kind="Release",
        origin="test",
        chart=ChartRef("kai-scheduler", "oci://ghcr.io/nvidia/kai-scheduler", "v0.13.0"),
        values={"global": {"tolerations": [{"operator": "Exists"}]}},
        images=(
            ImageRef(name="all", registry="global.registry", default={"registry": "ghcr.io/nvidia/kai-scheduler"}),
        ),
    )
    daemon = Component(
        key="installer",
        kind="Object",
        origin="test",
        manifest={
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": {"name": "x", "namespace": "kube-system"},
            "spec": {
                "template": {
                    "spec": {
                        "initContainers": [{"name": "a", "image": "ubuntu"}],
                        "containers": [
                            {"name": "b", "image": "us-docker.pkg.dev/gce-ai-infra/plugin:v1.0.15"},
                            {"name": "c", "image": "gke.gcr.io/pause:3.8@sha256:" + "8" * 64},
                        ],
                    }
                }
            },
        },
    )
    return dataclasses.replace(base, components=(*base.components, scheduler, daemon))


def test_prefix_only_registry_and_raw_manifest_containers_are_rewritten() -> None:
    synthetic = _synthetic()
    doc = {
        "registry": {
            "images": [{"from": "*", "to": MIRROR}, {"from": "docker.io", "to": "m.example.com/dockerhub"}],
            "charts": [{"from": "*", "to": CHART_MIRROR}],
            "imagePullSecrets": ["pull"],
            "strict": True,
        }
    }
    planned = {p.component.key: p for p in plan(synthetic, Collected(documents=tuple(_document(doc)))).planned}
    kai = planned["kai-scheduler"].component
    assert kai.values["global"]["registry"] == MIRROR + "/nvidia/kai-scheduler"
    assert kai.values["global"]["tolerations"] == [{"operator": "Exists"}]
    pod = planned["installer"].component.manifest["spec"]["template"]["spec"]
    assert pod["initContainers"][0]["image"] == "m.example.com/dockerhub/library/ubuntu"
    assert pod["containers"][0]["image"] == MIRROR + "/gce-ai-infra/plugin:v1.0.15"
    assert pod["containers"][1]["image"] == MIRROR + "/pause:3.8@sha256:" + "8" * 64  # digest kept
    assert pod["imagePullSecrets"] == [{"name": "pull"}]
    assert planned["installer"].changed_by == ("doc",)
    # The generated component is untouched (plans share nothing with it).
    original = next(c for c in synthetic.components if c.key == "installer")
    assert original.manifest["spec"]["template"]["spec"]["initContainers"][0]["image"] == "ubuntu"


def test_strict_catches_a_manifest_image_no_rule_covers() -> None:
    synthetic = _synthetic()
    hosts = sorted(strict.stack_hosts(synthetic) - {"docker.io"})
    doc = {"registry": {"images": [{"from": h, "to": f"{MIRROR}/{h}"} for h in hosts], "strict": True}}
    with pytest.raises(
        InputError, match=r"installer manifest\.spec\.template\.spec\.initContainers\[0\]\.image: ubuntu"
    ):
        plan(synthetic, Collected(documents=tuple(_document(doc))))


def test_untouched_components_stay_the_generated_objects() -> None:
    chosen = stack.load(Cloud.GKE, Accelerator.NVIDIA)
    assert chosen is not None
    planned = plan(
        chosen, Collected(documents=tuple(_document({"components": {"cert-manager": {"replicas": 2}}})))
    ).planned
    same = [p.component is c for p, c in zip(planned, chosen.components, strict=True)]
    assert same.count(False) == 1 and not same[[c.key for c in chosen.components].index("cert-manager")]


def test_generated_modules_exist_for_every_stack() -> None:
    assert len(generated.STACKS) == len(STACKS) >= 14
    assert len(PAIRS) >= 8


@pytest.mark.parametrize("kind", ["images", "charts"])
def test_a_rule_is_written_with_from_only(kind: str) -> None:
    # `from` is the field's only name: the Python attribute (source) is not a second spelling.
    target = "m.example.com/hub" if kind == "images" else "oci://m.example.com/charts"
    with pytest.raises(ValidationError, match="from\n  Field required"):
        OverrideDocument.model_validate({"registry": {kind: [{"source": "*", "to": target}]}})
    assert OverrideDocument.model_validate({"registry": {kind: [{"from": "*", "to": target}]}}).registry


def test_a_mirror_change_copies_only_what_it_writes() -> None:
    """A Release rebuilt for new mirrors shares every map off its image and pull-secret paths with the generated
    values, which stay as they were; a raw manifest no registry setting touches stays the generated object."""
    base = stack.load(Cloud.EKS, Accelerator.NVIDIA)
    assert base is not None
    before = {c.key: copy.deepcopy(c.values or c.manifest) for c in base.components}
    doc = {"registry": {"images": [{"from": "*", "to": "mirror.example.com/hub"}], "imagePullSecrets": ["pull"]}}
    documents = (
        Document(
            "mirrors", "EnvironmentConfig mirrors: data.servingStack", OverrideDocument.model_validate(doc), b"cow"
        ),
    )
    built = {p.component.key: p.component for p in plan(base, Collected(documents=documents)).planned}
    shared = untouched = 0
    for comp in base.components:
        new = built[comp.key]
        assert (comp.values or comp.manifest) == before[comp.key], f"{comp.key}: the generated values changed"
        if comp.is_release and comp.images:
            written = {
                path.split(".")[0]
                for img in comp.images
                for path in (img.ref, img.registry, img.repository, img.tag)
                if path
            } | {
                path.split(".")[0]
                for paths in (
                    comp.pull_secret_ref_list_paths,
                    comp.pull_secret_name_list_paths,
                    comp.pull_secret_name_paths,
                    comp.pull_secret_ref_paths,
                )
                for path in paths
            }
            assert new.values is not comp.values
            for key, value in comp.values.items():
                if key not in written and isinstance(value, dict):
                    assert new.values[key] is value, f"{comp.key}: values.{key} copied"
                    shared += 1
        if not comp.is_release and not comp.images and not any(pod_containers(comp.manifest)):
            assert new is comp, f"{comp.key}: rebuilt though no mirror touches it"
            untouched += 1
    assert shared and untouched  # the stack has both kinds


@pytest.mark.parametrize(("cloud", "accelerator"), [(c, a) for c, a, k in STACKS if k == "Dynamo"])
def test_image_pull_secrets_reach_kai_and_modelexpress_on_the_dynamo_stack(cloud: str, accelerator: str) -> None:
    doc = {"registry": {"imagePullSecrets": ["mirror-pull"]}}
    got = desired(overridden(make_xr(cloud, accelerator, stack="Dynamo"), ec("secrets", doc)))
    kai = got["kai-scheduler"]["spec"]["forProvider"]["values"]
    assert kai["global"]["imagePullSecrets"] == [{"name": "mirror-pull"}]
    server = got["modelexpress-server"]["spec"]["forProvider"]["manifest"]
    assert server["spec"]["template"]["spec"]["imagePullSecrets"] == [{"name": "mirror-pull"}]
    # grove-charts v0.1.0-alpha.6 has no pull-secret value (no imagePullSecrets in its templates): none written.
    assert "imagePullSecrets" not in str(got["grove"]["spec"]["forProvider"]["values"])
