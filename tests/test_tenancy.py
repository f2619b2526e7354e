"""A ServingStack reaches only its own namespace's secrets, over real gRPC (function.tenancy).

The Kubeconfig comes from the ServingStack's namespace, always; an identity
from its namespace or one the function Input allows
(``spec.secrets.allowedNamespaces``). Every other reference to a Secret the
function can compose is enumerated from the providers' CRDs (facts/crds) and
checked to stay inside the ServingStack's namespace, or to be one the
function never composes.
"""

from __future__ import annotations

import asyncio
import copy
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from crossplane.function import resource
from hypothesis import given
from hypothesis import strategies as st

from function import stack
from function.compose import provider_config_name
from function.offline import RenderError, RenderResult, run_composition, run_pipeline
from function.overrides.collect import INPUT_API_VERSION, parse_input_document
from function.xr import parse_xr
from tests.support import k8s_schema
from tests.support.crossplane import desired, grpc_runner
from tests.support.legacy import EKS, GKE, NEBIUS, V031
from tests.support.overrides import INPUT_CRD, bank, ec
from tests.support.repo import EXAMPLE, load_docs
from tests.support.requests import assert_readable, request, run
from tests.support.serve import Invoke
from tests.support.xr import make_xr, provider_configs

OWN = "team-ml"  # the example ServingStack's namespace
PCS = ("provider-config-helm", "provider-config-kubernetes")
KUBECONFIG = {"type": "Kubeconfig", "name": "prod-eu-1-kubeconfig", "key": "kubeconfig"}
IDENTITY = {"type": "GoogleApplicationCredentials", "name": "prod-eu-1-gcp", "key": "credentials.json"}
FUNCTION = "function-compose-serving-stack"  # the Function the shipped Compositions name (example/functions.yaml)
COMPOSITIONS = (EXAMPLE / "composition.yaml", EXAMPLE / "context" / "composition.yaml")
AFTERWORD = " (nothing is rendered; Crossplane keeps the last applied state)"


def allowing(*namespaces: str) -> dict[str, Any]:
    return {"apiVersion": INPUT_API_VERSION, "kind": "Input", "spec": {"secrets": {"allowedNamespaces": [*namespaces]}}}


def xr_with(*secrets: dict[str, Any]) -> dict[str, Any]:
    return make_xr("GKE", secrets=[*secrets])


def over_grpc(server: str, xr: dict[str, Any], input: dict[str, Any] | None = None, **kw: Any) -> RenderResult:
    return asyncio.run(run_pipeline(grpc_runner(server), xr=xr, observed=provider_configs(xr), input=input, **kw))


def fatal_over_grpc(server: str, xr: dict[str, Any], input: dict[str, Any] | None = None) -> str:
    """The one Fatal the function answers with; nothing desired beside it."""
    with pytest.raises(RenderError) as err:
        over_grpc(server, xr, input)
    rsp = err.value.response
    assert rsp is not None
    assert len(rsp.desired.resources) == 0 and not rsp.desired.composite.resource.fields
    assert not rsp.requirements.resources  # refused before asking for any EnvironmentConfig
    [result] = rsp.results
    return str(result.message)


def secret_refs(result: RenderResult) -> dict[str, tuple[dict[str, Any], dict[str, Any] | None]]:
    """(credentials, identity) secretRef of each ProviderConfig."""
    got = desired(result)
    return {
        key: (got[key]["spec"]["credentials"]["secretRef"], got[key]["spec"].get("identity", {}).get("secretRef"))
        for key in PCS
    }


# --------------------------------------------------------------------------- #
# The Kubeconfig: the ServingStack's namespace, always
# --------------------------------------------------------------------------- #


@pytest.mark.parametrize("input", [None, allowing("team-finance")], ids=["no Input", "Input allowing it"])
def test_a_kubeconfig_in_another_namespace_is_fatal_naming_the_entry(server: str, input: dict[str, Any] | None) -> None:
    xr = xr_with({**KUBECONFIG, "namespace": "team-finance"}, IDENTITY)
    # An Input's allowedNamespaces are for identities: no Composition widens where a kubeconfig comes from.
    assert fatal_over_grpc(server, xr, input) == (
        "ServingStack team-ml/prod-eu-1: spec.secrets[0] (Kubeconfig prod-eu-1-kubeconfig): namespace team-finance: "
        "a Kubeconfig is read from the ServingStack's own namespace team-ml only, so that a ServingStack reaches no "
        "other team's cluster; remove the namespace and keep the Secret beside the ServingStack" + AFTERWORD
    )


# --------------------------------------------------------------------------- #
# Identities: the ServingStack's namespace, or one the Composition allows
# --------------------------------------------------------------------------- #


def test_an_identity_in_another_namespace_is_fatal_without_an_input_policy(server: str) -> None:
    xr = xr_with(KUBECONFIG, {**IDENTITY, "namespace": "crossplane-system"})
    expected = (
        "ServingStack team-ml/prod-eu-1: spec.secrets[1] (GoogleApplicationCredentials prod-eu-1-gcp): namespace "
        "crossplane-system: not allowed; an identity secret may come from the ServingStack's own namespace team-ml "
        "only: the Composition's function Input allows no other namespace (spec.secrets.allowedNamespaces)" + AFTERWORD
    )
    assert fatal_over_grpc(server, xr) == expected
    # An Input without spec.secrets, or with an empty list, is no policy either.
    assert fatal_over_grpc(server, xr, {"apiVersion": INPUT_API_VERSION, "kind": "Input"}) == expected
    assert fatal_over_grpc(server, xr, allowing()) == expected


def test_an_identity_the_input_allows_renders_and_is_referenced_as_given(server: str) -> None:
    xr = xr_with(KUBECONFIG, {**IDENTITY, "namespace": "crossplane-system"})
    result = over_grpc(server, xr, allowing("shared-credentials", "crossplane-system"))
    for credentials, identity in secret_refs(result).values():
        assert credentials == {"name": "prod-eu-1-kubeconfig", "namespace": OWN, "key": "kubeconfig"}
        assert identity == {"name": "prod-eu-1-gcp", "namespace": "crossplane-system", "key": "credentials.json"}
    assert "gateway" in desired(result)  # the whole stack, not only the ProviderConfigs


def test_an_identity_outside_the_allowed_namespaces_is_fatal_listing_them(server: str) -> None:
    xr = xr_with(KUBECONFIG, {**IDENTITY, "namespace": "team-finance"})
    assert fatal_over_grpc(server, xr, allowing("crossplane-system", "shared-credentials", OWN)) == (
        "ServingStack team-ml/prod-eu-1: spec.secrets[1] (GoogleApplicationCredentials prod-eu-1-gcp): namespace "
        "team-finance: not allowed; an identity secret may come from the ServingStack's own namespace team-ml or the "
        "namespaces the Composition's function Input allows (spec.secrets.allowedNamespaces: crossplane-system, "
        "shared-credentials)" + AFTERWORD
    )


def test_secrets_in_the_own_namespace_render_unchanged(server: str) -> None:
    implicit = desired(over_grpc(server, xr_with(KUBECONFIG, IDENTITY)))
    explicit = xr_with({**KUBECONFIG, "namespace": OWN}, {**IDENTITY, "namespace": OWN})
    assert desired(over_grpc(server, explicit)) == implicit
    assert desired(over_grpc(server, explicit, allowing("crossplane-system"))) == implicit
    for key in PCS:
        assert implicit[key]["spec"]["identity"]["secretRef"]["namespace"] == OWN


# --------------------------------------------------------------------------- #
# The shipped Compositions, and v0.3.1's ServingStacks under them
# --------------------------------------------------------------------------- #


def _our_steps(path: Path) -> Iterator[dict[str, Any]]:
    [composition] = load_docs(path)
    for step in composition["spec"]["pipeline"]:
        if step["functionRef"]["name"] == FUNCTION:
            yield step


@pytest.mark.parametrize("path", COMPOSITIONS, ids=lambda p: str(p.relative_to(EXAMPLE)))
def test_every_shipped_composition_allows_where_v031_keeps_the_nebius_credential(path: Path) -> None:
    [step] = _our_steps(path)
    given = parse_input_document(step["input"])
    assert given is not None and given.spec.secrets is not None
    # v0.3.1's Nebius identity is the Nebius ClusterProviderConfig's Secret (facts/v0.3.1.yaml says where).
    assert given.spec.secrets.allowedNamespaces == (V031["secrets"]["nebiusIdentity"]["namespace"],)
    assert k8s_schema.CRDIndex([INPUT_CRD]).validate({**step["input"], "metadata": {"name": "x"}}) == []


def _under_the_shipped_composition(server: str, xr: dict[str, Any]) -> RenderResult:
    [composition] = load_docs(EXAMPLE / "composition.yaml")
    runners = {FUNCTION: grpc_runner(server)}
    return asyncio.run(run_composition(runners, composition, xr=xr, observed=provider_configs(xr)))


def _with_cloud(xr: dict[str, Any], cloud: str) -> dict[str, Any]:
    named = copy.deepcopy(xr)
    named["spec"]["cloud"] = cloud
    return named


@pytest.mark.parametrize("xr", [NEBIUS, _with_cloud(NEBIUS, "Nebius")], ids=["as v0.3.1 wrote it", "cloud set"])
def test_v031_nebius_serving_stacks_render_under_the_shipped_composition(server: str, xr: dict[str, Any]) -> None:
    result = _under_the_shipped_composition(server, xr)
    assert resource.struct_to_dict(result.desired.composite.resource)["status"]["stack"]["id"] == "nebius-nvidia"
    got = desired(result)
    assert "gateway" in got and "dra-driver" in got
    nebius = V031["secrets"]["nebiusIdentity"]
    for key in PCS:
        spec = got[key]["spec"]
        assert spec["credentials"]["secretRef"] == {
            "name": "c-kubeconfig",
            "namespace": V031["secrets"]["namespace"],  # the ServingStack's own
            "key": "kubeconfig",
        }
        assert spec["identity"] == {
            "type": nebius["type"],
            "source": "Secret",
            "secretRef": {"name": nebius["name"], "namespace": nebius["namespace"], "key": nebius["key"]},
        }
    # Without the Composition's policy the same ServingStack would be refused: this is what it is for.
    assert "namespace crossplane-system: not allowed" in fatal_over_grpc(server, xr)


@pytest.mark.parametrize("xr", [GKE, EKS], ids=["GKE", "EKS"])
def test_v031_identities_without_a_namespace_render_under_the_shipped_composition(
    server: str, xr: dict[str, Any]
) -> None:
    got = desired(_under_the_shipped_composition(server, xr))
    for key in PCS:
        assert got[key]["spec"]["identity"]["secretRef"]["namespace"] == V031["secrets"]["namespace"]


# --------------------------------------------------------------------------- #
# The Input's contract, and `function validate --xr`
# --------------------------------------------------------------------------- #


def test_the_input_crd_and_the_function_take_spec_secrets_allowed_namespaces(server: str) -> None:
    index = k8s_schema.CRDIndex([INPUT_CRD])
    assert index.validate({**allowing("crossplane-system"), "metadata": {"name": "x"}}) == []
    xr = xr_with(KUBECONFIG, IDENTITY)
    for bad, problem in (
        ("Crossplane-System", "String should match pattern"),
        ("x" * 64, "String should have at most 63 characters"),
        ("", "String should have at least 1 character"),
    ):
        assert index.validate({**allowing(bad), "metadata": {"name": "x"}}), bad
        message = fatal_over_grpc(server, xr, allowing(bad))
        assert message.startswith(f"function Input {INPUT_API_VERSION}: spec.secrets.allowedNamespaces[0]: {problem}")
    misspelt = {"apiVersion": INPUT_API_VERSION, "kind": "Input", "spec": {"secrets": {"allowedNamespace": ["a"]}}}
    assert "spec.secrets.allowedNamespace: unknown field" in fatal_over_grpc(server, xr, misspelt)


def _write(tmp_path: Path, name: str, doc: dict[str, Any]) -> str:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(doc))
    return str(path)


@pytest.mark.parametrize(
    ("secrets", "input"),
    [
        ([{**KUBECONFIG, "namespace": "team-finance"}], None),
        ([KUBECONFIG, {**IDENTITY, "namespace": "crossplane-system"}], None),
        ([KUBECONFIG, {**IDENTITY, "namespace": "team-finance"}], allowing("crossplane-system")),
    ],
    ids=["kubeconfig", "identity, no Input", "identity, not allowed"],
)
def test_validate_xr_reports_the_same_fatals(
    server: str, invoke: Invoke, tmp_path: Path, secrets: list[dict[str, Any]], input: dict[str, Any] | None
) -> None:
    xr = xr_with(*secrets)
    message = fatal_over_grpc(server, xr, input)
    (tmp_path / "configs").mkdir()
    args = ["validate", "-e", str(tmp_path / "configs"), "--xr", _write(tmp_path, "xr.yaml", xr)]
    if input is not None:
        args += ["--input", _write(tmp_path, "input.yaml", input)]
    out = invoke(*args)
    assert out.exit_code == 1
    assert out.stdout.splitlines() == [f"fatal: ServingStack prod-eu-1 ({tmp_path / 'xr.yaml'}): {message}"]


def test_validate_xr_passes_an_identity_the_input_allows(invoke: Invoke, tmp_path: Path) -> None:
    xr = xr_with(KUBECONFIG, {**IDENTITY, "namespace": "crossplane-system"})
    (tmp_path / "configs").mkdir()
    path, given = _write(tmp_path, "xr.yaml", xr), _write(tmp_path, "input.yaml", allowing("crossplane-system"))
    out = invoke("validate", "-e", str(tmp_path / "configs"), "--xr", path, "--input", given)
    assert out.exit_code == 0, out.stdout
    assert "against 1 ServingStacks: 0 fatal, 0 warnings" in out.stderr


# --------------------------------------------------------------------------- #
# Every reference to a Secret the function can compose
# --------------------------------------------------------------------------- #

# Every field of the composed kinds' CRDs (facts/crds) that names a Secret, or
# any object (a Secret among them), that a provider resolves on the control
# plane, and how the function bounds it. "never" fields the function does not
# write, and no input can make it write: the XR's secrets fill the
# ProviderConfigs only, and an override document reaches a Release's values,
# an Object's manifest and the chart block, nothing else.
COMPOSED, NEVER = "composed", "never"
REFERENCES = {
    # The kubeconfig: the XR's namespace only (function.tenancy).
    ("ProviderConfig", "spec.credentials.secretRef"): COMPOSED,
    # The identity: the XR's namespace or one of the Input's allowedNamespaces (function.tenancy).
    ("ProviderConfig", "spec.identity.secretRef"): COMPOSED,
    # Always kind ProviderConfig, the XR's own, which the providers look up in the
    # managed resource's namespace (provider-helm pkg/clients/helm/helm.go); never a
    # ClusterProviderConfig, whose secrets may sit anywhere.
    ("Release", "spec.providerConfigRef"): COMPOSED,
    ("Object", "spec.providerConfigRef"): COMPOSED,
    # registry.chartPullSecretRef (a name only): a LocalSecretReference, read in the
    # Release's own namespace (provider-helm pkg/clients/registryauth/auth.go), which
    # Crossplane sets to the XR's.
    ("Release", "spec.forProvider.chart.pullSecretRef"): COMPOSED,
    # A Usage holds the XR's own ProviderConfig, by name.
    ("Usage", "spec.of.resourceRef"): COMPOSED,
    # Never composed. Local references, read in the resource's own namespace:
    ("Release", "spec.forProvider.valuesFrom[].secretKeyRef"): NEVER,
    ("Release", "spec.forProvider.set[].valueFrom.secretKeyRef"): NEVER,
    ("Release", "spec.forProvider.patchesFrom[].secretKeyRef"): NEVER,
    ("Release", "spec.writeConnectionSecretToRef"): NEVER,
    ("Object", "spec.writeConnectionSecretToRef"): NEVER,
    # Objects on the remote cluster, written into the connection secret:
    ("Release", "spec.connectionDetails[]"): NEVER,
    ("Object", "spec.connectionDetails[]"): NEVER,
    # Any object in any namespace of the control plane, read with the provider's own
    # client (provider-kubernetes internal/controller/namespaced/object/object.go,
    # resolveReferencies: localClient): the one that would cross namespaces.
    ("Object", "spec.references[].dependsOn"): NEVER,
    ("Object", "spec.references[].patchesFrom"): NEVER,
}


def _crd_references(schema: dict[str, Any], path: str = "") -> Iterator[str]:
    """Paths of objects in a CRD schema that name a Secret (a ``*secret*`` field with a name) or any object
    (a name beside a kind or a namespace)."""
    props = schema.get("properties") or {}
    last = path.rsplit(".", 1)[-1].removesuffix("[]")
    if "name" in props and (re.search("secret", last, re.IGNORECASE) or {"kind", "namespace"} & set(props)):
        yield path
    for key, child in props.items():
        yield from _crd_references(child, f"{path}.{key}" if path else key)
    if "items" in schema:
        yield from _crd_references(schema["items"], f"{path}[]")


def _at(body: Any, path: str) -> Iterator[Any]:
    """Every value at ``path`` (``[]`` steps into each item of a list)."""
    head, _, rest = path.partition(".")
    key, listed = head.removesuffix("[]"), head.endswith("[]")
    value = body.get(key) if isinstance(body, dict) else None
    for item in (value if isinstance(value, list) else []) if listed else [value]:
        if item is None:
            continue
        if rest:
            yield from _at(item, rest)
        else:
            yield item


def _secret_keys(body: Any, path: str = "") -> Iterator[str]:
    """Paths of every key naming a secret (``*secret*``, any case) in a composed body."""
    if isinstance(body, dict):
        for key, value in body.items():
            here = f"{path}.{key}" if path else str(key)
            if re.search("secret", str(key), re.IGNORECASE):
                yield here
            yield from _secret_keys(value, here)
    elif isinstance(body, list):
        for item in body:
            yield from _secret_keys(item, f"{path}[]")


# What goes to the remote cluster: a Helm chart's values and a raw manifest name
# Secrets there, which the ServingStack's own kubeconfig already reaches.
REMOTE = ("spec.forProvider.values", "spec.forProvider.manifest")


@pytest.mark.parametrize(("cloud", "accelerator", "kind"), stack.available())
def test_every_secret_reference_the_function_can_compose_is_bounded(
    server: str, cloud: str, accelerator: str, kind: str
) -> None:
    xr = make_xr(cloud, accelerator, stack=kind, secrets=[KUBECONFIG, {**IDENTITY, "namespace": "crossplane-system"}])
    # Every way an override document names a secret: chart and image pull secrets.
    mirror = ec("bank", bank(chartPullSecretRef={"name": "chart-pull"}))
    got = desired(over_grpc(server, xr, allowing("crossplane-system"), required=[mirror]))
    pc_name = provider_config_name(parse_xr(xr))
    index = k8s_schema.index()
    seen: set[tuple[str, str]] = set()
    remote: set[str] = set()
    for key, body in got.items():
        crd = index.lookup(body)
        assert crd is not None, key
        kind = body["kind"]
        # Crossplane puts every composed resource into the XR's namespace (composition_render.go,
        # RenderComposedResourceMetadata) and warns when a function names another: none is named.
        assert "namespace" not in body.get("metadata", {}), key
        for path in _crd_references(crd.schema):
            assert (kind, path) in REFERENCES, f"{crd.api_version} {kind} {path}: a reference not yet classified"
            for ref in _at(body, path):
                seen.add((kind, path))
                assert REFERENCES[kind, path] == COMPOSED, f"{key}: composes {path}, which it must never compose"
                _bounded(kind, path, ref, body, pc_name)
        for found in _secret_keys(body):
            if found.startswith(REMOTE):
                remote.add(found)
            else:
                assert any(found.startswith(p.removesuffix("[]")) for k, p in REFERENCES if k == kind), (key, found)
    composed = {ref for ref, how in REFERENCES.items() if how == COMPOSED}
    assert seen == composed  # each one the function composes was seen and checked on this stack
    assert any(".imagePullSecrets" in path or "Secret" in path for path in remote)  # the walk reaches the values


def _bounded(kind: str, path: str, ref: dict[str, Any], body: dict[str, Any], pc_name: str) -> None:
    if path == "spec.credentials.secretRef":
        assert ref["namespace"] == OWN and body["spec"]["credentials"]["source"] == "Secret"
    elif path == "spec.identity.secretRef":
        assert ref["namespace"] in (OWN, "crossplane-system") and body["spec"]["identity"]["source"] == "Secret"
    elif path == "spec.providerConfigRef":
        assert ref == {"kind": "ProviderConfig", "name": pc_name}
    elif path == "spec.forProvider.chart.pullSecretRef":
        assert ref == {"name": "chart-pull"}  # and the CRD takes no namespace: see REFERENCES
    elif path == "spec.of.resourceRef":
        assert ref == {"name": pc_name} and body["spec"]["of"]["kind"] == "ProviderConfig"
    else:
        raise AssertionError(f"{kind} {path}: no bound checked")


def test_the_local_references_take_no_namespace_in_the_providers_crds() -> None:
    """What REFERENCES calls local is so in the CRDs: a name (and key), never a namespace."""
    index = k8s_schema.index()
    local = {
        ("helm.m.crossplane.io/v1beta1", "Release"): (
            "spec.forProvider.chart.pullSecretRef",
            "spec.forProvider.valuesFrom[].secretKeyRef",
            "spec.forProvider.set[].valueFrom.secretKeyRef",
            "spec.forProvider.patchesFrom[].secretKeyRef",
            "spec.writeConnectionSecretToRef",
        ),
        ("kubernetes.m.crossplane.io/v1alpha1", "Object"): ("spec.writeConnectionSecretToRef",),
    }
    for (api, kind), paths in local.items():
        crd = index.lookup({"apiVersion": api, "kind": kind})
        assert crd is not None and crd.namespaced
        for path in paths:
            assert "namespace" not in _schema_at(crd.schema, path)["properties"], f"{kind} {path}"


def _schema_at(schema: dict[str, Any], path: str) -> dict[str, Any]:
    node = schema
    for step in path.split("."):
        node = node["properties"][step.removesuffix("[]")]
        if step.endswith("[]"):
            node = node["items"]
    return node


# --------------------------------------------------------------------------- #
# Whatever the secrets and the policy, what renders stays within them
# --------------------------------------------------------------------------- #

NAMESPACES = st.sampled_from([None, "", OWN, "team-finance", "crossplane-system", "Team-ML", "x" * 200])
POLICIES = st.one_of(
    st.none(), st.lists(st.sampled_from([OWN, "team-finance", "crossplane-system"]), max_size=3).map(tuple)
)


@given(
    kubeconfig_namespace=NAMESPACES,
    identity_namespace=NAMESPACES,
    identity=st.booleans(),
    allowed=POLICIES,
    xr_namespace=st.sampled_from([OWN, "team-finance"]),
)
def test_whatever_the_secrets_say_the_provider_configs_stay_within_the_allowed_namespaces(
    kubeconfig_namespace: str | None,
    identity_namespace: str | None,
    identity: bool,
    allowed: tuple[str, ...] | None,
    xr_namespace: str,
) -> None:
    secrets = [{**KUBECONFIG, "namespace": kubeconfig_namespace}]
    if identity:
        secrets.append({**IDENTITY, "namespace": identity_namespace})
    xr = xr_with(*secrets)
    xr["metadata"]["namespace"] = xr_namespace
    rsp = run(request(xr, input=allowing(*allowed) if allowed is not None else None))
    message = assert_readable(rsp)  # a bounded Fatal, or a render
    refs = [
        resource.struct_to_dict(rsp.desired.resources[key].resource)["spec"]
        for key in PCS
        if key in rsp.desired.resources
    ]
    kubeconfig_ok = kubeconfig_namespace in (None, "", xr_namespace)
    identity_ok = not identity or identity_namespace in (None, "", xr_namespace, *(allowed or ()))
    assert (message is None) == (kubeconfig_ok and identity_ok), message
    for spec in refs:
        assert spec["credentials"]["secretRef"]["namespace"] == xr_namespace
        if identity:
            assert spec["identity"]["secretRef"]["namespace"] in (xr_namespace, *(allowed or ()))
    if message is not None:
        assert "spec.secrets[" in message and ("Kubeconfig" in message) == (not kubeconfig_ok)
