"""``function images``: every image and chart a stack pulls after overrides, for mirroring tools."""

from __future__ import annotations

from pathlib import Path

import yaml

from function import stack
from function.model import Accelerator, Cloud
from function.overrides import pulls
from function.overrides.document import Collected, Document, OverrideDocument
from function.overrides.images import qualify, split_reference
from tests.support.serve import Invoke

BANK = "example/environmentconfigs/regulated-bank.yaml"
MIRROR = "artifactory.bank.example"


def _lines(invoke: Invoke, *args: str) -> list[str]:
    out = invoke("images", *args)
    assert out.exit_code == 0, out.stderr
    return out.stdout.splitlines()


def test_without_documents_every_stack_lists_upstream_images_and_charts_once(invoke: Invoke) -> None:
    lines = _lines(invoke)
    assert len(lines) == len(set(lines)) == len(sorted(lines))
    for expected in (
        "image docker.io/envoyproxy/envoy:distroless-v1.38.1",  # the controller's built-in proxy
        "image docker.io/envoyproxy/ratelimit:ff287602",
        "image docker.io/library/busybox:1.36",  # Docker Hub short names made explicit
        "image quay.io/jetstack/cert-manager-controller:v1.17.2",  # the chart's appVersion tag
        "image nvcr.io/nvidia/gpu-operator:v25.10.1",
        "image docker.io/rocm/gpu-operator-utils:v1.4.0",
        "chart https://charts.jetstack.io cert-manager v1.17.2",
        "chart oci://docker.io/envoyproxy gateway-helm v1.8.1",
        "registry docker.io",  # where the AMD operator builds driver images from
    ):
        assert expected in lines
    assert {line.split()[0] for line in lines} == {"image", "chart", "registry"}


def test_with_the_bank_mirror_everything_comes_from_the_mirror(invoke: Invoke) -> None:
    lines = _lines(invoke, "--xr", "example/xr.yaml", "-e", BANK)
    assert len(lines) > 30
    for line in lines:
        kind, ref = line.split(" ", 1)
        assert ref.startswith(f"oci://{MIRROR}/" if kind == "chart" else f"{MIRROR}/"), line
    assert f"image {MIRROR}/dockerhub/envoyproxy/envoy:distroless-v1.38.1" in lines


def test_pairs_name_upstream_and_mirror(invoke: Invoke) -> None:
    lines = _lines(invoke, "--xr", "example/xr.yaml", "-e", BANK, "--format", "pairs")
    controller = "jetstack/cert-manager-controller:v1.17.2"
    assert f"image quay.io/{controller} -> {MIRROR}/remote/{controller}" in lines
    assert (
        f"chart https://charts.jetstack.io cert-manager v1.17.2 -> oci://{MIRROR}/helm-remote cert-manager v1.17.2"
        in lines
    )


def test_skopeo_sync_puts_every_image_where_the_mirror_rules_point(invoke: Invoke) -> None:
    mirrored = {line.split(" ", 1)[1] for line in _lines(invoke, "-e", BANK) if line.startswith("image ")}
    out = invoke("images", "-e", BANK, "--format", "skopeo")
    assert out.exit_code == 0, out.stderr
    placed = set()
    for text in out.stdout.split("---\n"):
        header, _, body = text.partition("\n")
        assert header.startswith("# skopeo sync --src yaml --dest docker <this file> "), header
        dest = header.rsplit(" ", 1)[1]
        for _registry, spec in yaml.safe_load(body).items():
            for path, tags in spec["images"].items():
                # skopeo sync (unscoped) writes <dest>/<path>:<tag>.
                placed |= {f"{dest}/{path}:{tag}" for tag in tags} or {f"{dest}/{path}"}
    assert placed == mirrored


def test_skopeo_refuses_a_rule_it_cannot_reproduce(tmp_path: Path, invoke: Invoke) -> None:
    doc = {
        "apiVersion": "apiextensions.crossplane.io/v1beta1",
        "kind": "EnvironmentConfig",
        "metadata": {"name": "deep", "labels": {"servingstack.modelplane.ai/overrides": "true"}},
        "data": {"servingStack": {"registry": {"images": [{"from": "nvcr.io/nvidia", "to": "m.example.com/nv"}]}}},
    }
    file = tmp_path / "deep.yaml"
    file.write_text(yaml.safe_dump(doc))
    out = invoke("images", "--xr", "example/xr.yaml", "-e", str(file), "--format", "skopeo")
    assert out.exit_code == 1
    assert out.stderr.count("\n") == 1 and "use --format pairs" in out.stderr


def test_a_strict_failure_exits_non_zero_in_one_line(tmp_path: Path, invoke: Invoke) -> None:
    policy = {
        "apiVersion": "servingstack.fn.modelplane.ai/v1beta1",
        "kind": "Input",
        "spec": {"registry": {"strict": True, "allowedRegistries": ["mirror.bank.internal"]}},
    }
    file = tmp_path / "input.yaml"
    file.write_text(yaml.safe_dump(policy))
    out = invoke("images", "--xr", "example/xr.yaml", "--input", str(file))
    assert out.exit_code == 1 and out.stdout == ""
    assert out.stderr.startswith("function: prod-eu-1: function Input: spec.registry.strict: no override document")
    assert out.stderr.count("\n") == 1


def test_components_the_function_does_not_manage_pull_nothing() -> None:
    chosen = stack.load(Cloud.EXISTING, Accelerator.NVIDIA)
    assert chosen is not None
    doc = OverrideDocument.model_validate({"components": {"cert-manager": {"state": "Unmanaged"}}})
    found = Collected(("byo",), (Document("byo", "EnvironmentConfig byo: data.servingStack", doc, b"byo"),))
    listed = pulls.pulls(chosen, found)
    assert not [p for p in listed if p.component == "cert-manager"]
    assert [p for p in listed if p.component == "prometheus" and p.kind == pulls.CHART]
    for p in listed:
        if p.kind == pulls.IMAGE:
            assert p.ref == p.source == qualify(split_reference(p.ref)[0]) + split_reference(p.ref)[1]
