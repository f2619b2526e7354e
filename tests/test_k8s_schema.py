"""The tests' schema validator (tests/support/k8s_schema.py): it must catch real mistakes and accept real objects."""

from __future__ import annotations

import asyncio
import copy
from pathlib import Path
from typing import Any

import pytest
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from function import offline, render_output
from tests.support import k8s_schema as ks

RELEASE: dict[str, Any] = {
    "apiVersion": "helm.m.crossplane.io/v1beta1",
    "kind": "Release",
    "metadata": {
        "name": "cert-manager",
        "namespace": "team-a",
        "annotations": {"crossplane.io/external-name": "mp-cert-manager"},
    },
    "spec": {
        "forProvider": {
            "chart": {"name": "cert-manager", "repository": "https://charts.jetstack.io", "version": "v1.17.2"},
            "namespace": "cert-manager",
            "values": {"crds": {"enabled": True}, "replicaCount": 2, "anything": [{"goes": None}]},
        },
        "providerConfigRef": {"kind": "ProviderConfig", "name": "demo-helm"},
    },
}

NVIDIA_DRIVER: dict[str, Any] = {
    "apiVersion": "nvidia.com/v1alpha1",
    "kind": "NVIDIADriver",
    "metadata": {"name": "default"},
    "spec": {"driverType": "gpu", "image": "nvcr.io/nvidia/driver", "version": "580.95.05"},
}

OBJECT: dict[str, Any] = {
    "apiVersion": "kubernetes.m.crossplane.io/v1alpha1",
    "kind": "Object",
    "metadata": {"name": "nvidia-driver", "namespace": "team-a"},
    "spec": {
        "forProvider": {"manifest": copy.deepcopy(NVIDIA_DRIVER)},
        "providerConfigRef": {"kind": "ProviderConfig", "name": "demo-kubernetes"},
        "readiness": {"policy": "DeriveFromObject"},
    },
}

HELM_PROVIDER_CONFIG: dict[str, Any] = {
    "apiVersion": "helm.m.crossplane.io/v1beta1",
    "kind": "ProviderConfig",
    "metadata": {"name": "demo-helm", "namespace": "team-a"},
    "spec": {
        "credentials": {
            "source": "Secret",
            "secretRef": {"name": "cluster-kubeconfig", "namespace": "team-a", "key": "kubeconfig"},
        }
    },
}


def mutate(obj: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """Deep copy ``obj`` and set (or, with value ``...``, delete) the dotted ``path``."""
    out = copy.deepcopy(obj)
    *parents, leaf = path.split(".")
    node = out
    for p in parents:
        node = node[p]
    if value is ...:
        del node[leaf]
    else:
        node[leaf] = value
    return out


def one_error(obj: dict[str, Any]) -> str:
    errors = ks.validate(obj)
    assert len(errors) == 1, errors
    return errors[0]


# --------------------------------------------------------------------------- #
# The index
# --------------------------------------------------------------------------- #


def test_index_finds_every_crd_file() -> None:
    idx = ks.index()
    crd_files = sorted(p.name for p in ks.crd_dir().glob("*.yaml") if p.name != "SOURCES.yaml")
    assert len(crd_files) >= 17
    assert {p.name for p in idx.sources} >= set(crd_files)
    for api_version, kind in [
        ("helm.m.crossplane.io/v1beta1", "Release"),
        ("helm.crossplane.io/v1beta1", "Release"),
        ("helm.m.crossplane.io/v1beta1", "ProviderConfig"),
        ("kubernetes.m.crossplane.io/v1alpha1", "ProviderConfig"),
        ("kubernetes.m.crossplane.io/v1alpha1", "Object"),
        ("nvidia.com/v1alpha1", "NVIDIADriver"),
        ("amd.com/v1alpha1", "DeviceConfig"),
        ("protection.crossplane.io/v1beta1", "Usage"),
        ("apiextensions.crossplane.io/v1beta1", "EnvironmentConfig"),
    ]:
        assert ks.covered({"apiVersion": api_version, "kind": kind}), (api_version, kind)
    assert ks.index().versions[("nvidia.com/v1alpha1", "NVIDIADriver")].scope == "Cluster"
    assert ks.index().versions[("amd.com/v1alpha1", "DeviceConfig")].scope == "Namespaced"


def test_uncovered_kinds() -> None:
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}}
    assert not ks.covered(cm)
    assert "no CRD for v1 ConfigMap" in one_error(cm)
    wrong_version = mutate(RELEASE, "apiVersion", "helm.m.crossplane.io/v1")
    assert not ks.covered(wrong_version)
    assert "this kind exists as:" in one_error(wrong_version)


def test_index_over_other_crd_files(tmp_path: Path) -> None:
    (tmp_path / "example.org_widgets.yaml").write_text(
        """
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.example.org}
spec:
  group: example.org
  scope: Namespaced
  names: {kind: Widget, plural: widgets}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            required: [size]
            properties:
              size: {type: integer}
"""
    )
    idx = ks.CRDIndex([tmp_path / "example.org_widgets.yaml"])
    assert list(idx.versions) == [("example.org/v1", "Widget")]
    widget = {"apiVersion": "example.org/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {"size": 1}}
    assert idx.validate(widget) == []
    assert idx.validate(mutate(widget, "spec", {})) == ["spec.size: Required value"]


# --------------------------------------------------------------------------- #
# Valid objects
# --------------------------------------------------------------------------- #


@pytest.mark.parametrize("obj", [RELEASE, OBJECT, HELM_PROVIDER_CONFIG, NVIDIA_DRIVER], ids=lambda o: o["kind"])
def test_valid_minimal_objects(obj: dict[str, Any]) -> None:
    assert ks.covered(obj)
    assert ks.validate(obj) == []


def test_defaults_are_applied_before_required_is_checked() -> None:
    # NVIDIADriver (v25.10.1) requires driverType and image, but both have defaults.
    assert ks.validate({**NVIDIA_DRIVER, "spec": {}}) == []
    # Release.spec.providerConfigRef is optional and defaulted; Object readiness policy too.
    assert ks.validate(mutate(RELEASE, "spec.providerConfigRef", ...)) == []


def test_validate_does_not_modify_its_input() -> None:
    obj = {**NVIDIA_DRIVER, "spec": {}}
    ks.validate(obj)
    assert obj["spec"] == {}


def test_preserve_unknown_fields_allow_anything_below() -> None:
    values = {"deeply": {"nested": [1, "two", {"three": 3.0}]}, "image": {"repository": "r", "tag": 1}}
    assert ks.validate(mutate(RELEASE, "spec.forProvider.values", values)) == []


def test_other_kinds_from_the_crds_in_facts() -> None:
    usage = {
        "apiVersion": "protection.crossplane.io/v1beta1",
        "kind": "Usage",
        "metadata": {"name": "gateway-uses-envoy", "namespace": "team-a"},
        "spec": {
            "replayDeletion": True,
            "of": {"apiVersion": "helm.m.crossplane.io/v1beta1", "kind": "Release", "resourceRef": {"name": "a"}},
            "by": {"apiVersion": "helm.m.crossplane.io/v1beta1", "kind": "Release", "resourceRef": {"name": "b"}},
        },
    }
    assert ks.validate(usage) == []
    no_by = mutate(usage, "spec.by", ...)
    assert one_error(no_by) == 'spec: Invalid value: either "spec.by" or "spec.reason" must be specified.'
    env = {
        "apiVersion": "apiextensions.crossplane.io/v1beta1",
        "kind": "EnvironmentConfig",
        "metadata": {"name": "serving-defaults", "labels": {"tier": "gpu"}},
        "data": {"registry": {"host": "r.example"}, "replicas": 2},
    }
    assert ks.validate(env) == []
    device_config = {
        "apiVersion": "amd.com/v1alpha1",
        "kind": "DeviceConfig",
        "metadata": {"name": "gpus", "namespace": "kube-amd-gpu"},
        "spec": {"driver": {"enable": True}, "selector": {"feature.node.kubernetes.io/amd-gpu": "true"}},
    }
    assert ks.validate(device_config) == []


# --------------------------------------------------------------------------- #
# Invalid objects
# --------------------------------------------------------------------------- #


def test_wrong_type() -> None:
    err = one_error(mutate(RELEASE, "spec.forProvider.chart.name", 5))
    assert err == "spec.forProvider.chart.name: Invalid value: 5: must be string, got integer"
    err = one_error(mutate(RELEASE, "spec.forProvider.maxHistory", "20"))
    assert err.startswith("spec.forProvider.maxHistory: Invalid value: '20': must be integer")
    err = one_error(mutate(RELEASE, "spec.forProvider.wait", "yes"))
    assert err.startswith("spec.forProvider.wait: Invalid value: 'yes': must be boolean")
    err = one_error(mutate(RELEASE, "spec.forProvider.chart.version", None))
    assert "the field is not nullable" in err


def test_int32_range() -> None:
    err = one_error(mutate(RELEASE, "spec.rollbackLimit", 2**31))
    assert err.startswith("spec.rollbackLimit:") and "int32" in err


def test_unknown_field() -> None:
    err = one_error(mutate(RELEASE, "spec.forProvider.chart.nmae", "typo"))
    assert err == "spec.forProvider.chart.nmae: unknown field (not in the CRD schema; the API server would prune it)"
    # v2 namespaced managed resources have no deletionPolicy.
    err = one_error(mutate(RELEASE, "spec.deletionPolicy", "Orphan"))
    assert err.startswith("spec.deletionPolicy: unknown field")
    err = one_error(mutate(RELEASE, "status", {"whatever": 1}))
    assert err.startswith("status.whatever: unknown field")
    err = one_error(mutate(RELEASE, "metadata.labelz", {}))
    assert err.startswith("metadata.labelz: unknown field")


def test_missing_required_field() -> None:
    assert one_error(mutate(RELEASE, "spec.forProvider.chart", ...)) == "spec.forProvider.chart: Required value"
    assert one_error(mutate(RELEASE, "spec", ...)) == "spec: Required value"
    pc = mutate(HELM_PROVIDER_CONFIG, "spec.credentials.secretRef.key", ...)
    assert one_error(pc) == "spec.credentials.secretRef.key: Required value"
    no_name = mutate(RELEASE, "metadata.name", ...)
    assert one_error(no_name) == "metadata.name: Required value: name or generateName is required"
    assert ks.validate(mutate(no_name, "metadata.generateName", "demo-")) == []


def test_enum() -> None:
    err = one_error(mutate(HELM_PROVIDER_CONFIG, "spec.credentials.source", "Vault"))
    assert err.startswith("spec.credentials.source: Unsupported value: 'Vault'")


def test_int_or_string() -> None:
    for ok in (1, "1Gi"):
        driver = mutate(NVIDIA_DRIVER, "spec.resources", {"limits": {"memory": ok}})
        assert ks.validate(driver) == [], ok
    err = one_error(mutate(NVIDIA_DRIVER, "spec.resources", {"limits": {"memory": True}}))
    assert err.startswith("spec.resources.limits.memory: Invalid value: True: must be integer or string")


def test_cel_rules() -> None:
    # NVIDIADriver v25.10.1 has no spec.default (nor its CEL rule): a field the CRD lacks is pruned.
    err = one_error(mutate(NVIDIA_DRIVER, "spec.default", True))
    assert err.startswith("spec.default: unknown field")
    cel = mutate(OBJECT, "spec.readiness", {"policy": "DeriveFromCelQuery"})
    assert "celQuery must be set if policy is DeriveFromCelQuery" in one_error(cel)


def test_embedded_manifest_is_validated_against_its_own_crd() -> None:
    bad = mutate(OBJECT, "spec.forProvider.manifest.spec.driverTyp", "gpu")
    assert one_error(bad).startswith("spec.forProvider.manifest.spec.driverTyp: unknown field")
    bad = mutate(OBJECT, "spec.forProvider.manifest.spec.driverType", "cpu")
    assert one_error(bad).startswith("spec.forProvider.manifest.spec.driverType: Unsupported value: 'cpu'")
    # NVIDIADriver is cluster-scoped: a namespace on it is an error.
    bad = mutate(OBJECT, "spec.forProvider.manifest.metadata", {"name": "default", "namespace": "gpu-operator"})
    assert one_error(bad).startswith("spec.forProvider.manifest.metadata.namespace: Invalid value: 'gpu-operator'")
    # The Object schema itself requires apiVersion and kind of any embedded manifest.
    no_kind = mutate(OBJECT, "spec.forProvider.manifest", {"apiVersion": "v1", "metadata": {"name": "x"}})
    assert one_error(no_kind) == "spec.forProvider.manifest.kind: Required value"
    # A manifest whose kind has no CRD here is only checked as an embedded resource.
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}, "data": {"a": "b"}}
    assert ks.validate(mutate(OBJECT, "spec.forProvider.manifest", cm)) == []
    bad_meta = mutate(OBJECT, "spec.forProvider.manifest", {**cm, "metadata": {"name": "x", "labelz": {}}})
    assert one_error(bad_meta).startswith("spec.forProvider.manifest.metadata.labelz: unknown field")
    bad_name = mutate(OBJECT, "spec.forProvider.manifest", {**cm, "metadata": {"name": "Not_Valid"}})
    assert one_error(bad_name).startswith("spec.forProvider.manifest.metadata.name: Invalid value: 'Not_Valid'")
    # The same mistake in a covered manifest is reported once.
    bad_driver_name = mutate(OBJECT, "spec.forProvider.manifest.metadata.name", "Not_Valid")
    assert one_error(bad_driver_name).startswith("spec.forProvider.manifest.metadata.name: Invalid value")


def test_object_meta_checks() -> None:
    bad_label = mutate(RELEASE, "metadata.labels", {"app": "has spaces"})
    assert "a valid label value" in one_error(bad_label)
    bad_name = mutate(RELEASE, "metadata.name", "Cert_Manager")
    assert one_error(bad_name).startswith("metadata.name: Invalid value: 'Cert_Manager'")
    bad_owner = mutate(RELEASE, "metadata.ownerReferences", [{"apiVersion": "v1", "kind": "X", "name": "x"}])
    assert one_error(bad_owner) == "metadata.ownerReferences[0].uid: Required value"
    cluster_scoped = mutate(NVIDIA_DRIVER, "metadata.namespace", "default")
    assert "cluster-scoped" in one_error(cluster_scoped)


def test_list_map_keys_must_be_unique() -> None:
    composition: dict[str, Any] = {
        "apiVersion": "apiextensions.crossplane.io/v1",
        "kind": "Composition",
        "metadata": {"name": "serving-stack"},
        "spec": {
            "compositeTypeRef": {"apiVersion": "infrastructure.modelplane.ai/v1alpha1", "kind": "ServingStack"},
            "mode": "Pipeline",
            "pipeline": [
                {
                    "step": "render",
                    "functionRef": {"name": "function-compose-serving-stack"},
                    "input": {"apiVersion": "x.fn/v1", "kind": "Input"},
                }
            ],
        },
    }
    assert ks.validate(composition) == []
    twice = mutate(composition, "spec.pipeline", composition["spec"]["pipeline"] * 2)
    assert "Duplicate value: {'step': 'render'}" in one_error(twice)
    no_input_kind = mutate(composition, "spec.pipeline", [{**composition["spec"]["pipeline"][0], "input": {}}])
    errors = ks.validate(no_input_kind)
    assert errors == [
        "spec.pipeline[0].input.apiVersion: Required value",
        "spec.pipeline[0].input.kind: Required value",
    ]


# --------------------------------------------------------------------------- #
# Render output
# --------------------------------------------------------------------------- #


def test_rendered_composed_resources_validate() -> None:
    """What render adds (generateName, labels, annotations, controller ref with empty uid) is valid metadata."""
    xr = {
        "apiVersion": "infrastructure.modelplane.ai/v1alpha1",
        "kind": "ServingStack",
        "metadata": {"name": "demo", "namespace": "team-a"},
    }

    async def run(_req: fnv1.RunFunctionRequest) -> fnv1.RunFunctionResponse:
        rsp = fnv1.RunFunctionResponse()
        release = {k: v for k, v in RELEASE.items() if k != "metadata"}
        release["metadata"] = {"annotations": RELEASE["metadata"]["annotations"]}
        rsp.desired.resources["cert-manager"].resource.update(release)
        rsp.desired.resources["nvidia-driver"].resource.update({k: v for k, v in OBJECT.items() if k != "metadata"})
        rsp.desired.resources["helm-config"].resource.update(
            {k: v for k, v in HELM_PROVIDER_CONFIG.items() if k != "metadata"}
        )
        return rsp

    result = asyncio.run(offline.run_pipeline(run, xr=xr))
    docs = render_output.render_documents(result)
    assert [d["kind"] for d in docs] == ["ServingStack", "Release", "ProviderConfig", "Object"]
    assert docs[1]["metadata"]["ownerReferences"][0]["uid"] == ""
    assert ks.validate_documents(docs[1:], require_covered=True) == []
    assert ks.validate_documents(docs, require_covered=True) == [
        "ServingStack demo: no CRD for infrastructure.modelplane.ai/v1alpha1 ServingStack"
    ]
