"""Components a document adds, over real gRPC, reconcile after reconcile: the previous output fed back as
observed, the status the function wrote sent back on the XR (tests/support/cluster.py)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from function.helm import Charts, HelmError, render_release
from function.offline import RenderError, RenderResult
from function.overrides.memory import RETIRE_ANNOTATION
from function.render_output import render_documents
from tests.support import k8s_schema
from tests.support.cluster import USAGE, Cluster, api_kind, resolve, usages
from tests.support.crossplane import desired
from tests.support.overrides import ec, fatal, mirror_all, overridden, stack_status
from tests.support.repo import EXAMPLE, load_docs
from tests.support.serve import Invoke
from tests.support.status import assert_converted_as_the_whole_status, recorded
from tests.support.xr import make_xr

WARNING, NORMAL = 2, 3
SUBSTITUTION = EXAMPLE / "substitution"
BYO_ISSUER = load_docs(SUBSTITUTION / "byo-issuer.yaml")[0]
SERVING_POOL = load_docs(SUBSTITUTION / "serving-pool.yaml")[0]
POOL_XR = load_docs(SUBSTITUTION / "xr-serving-pool.yaml")[0]

CHART = {"name": "team-agent", "repository": "oci://registry.team.example/charts", "version": "2.0.0"}
AGENT: dict[str, Any] = {
    "chart": CHART,
    "namespace": "team-agent",
    "dependsOn": ["prometheus"],
    "values": {"agent": {"image": "quay.io/team/agent:2.0.0"}, "pullSecrets": []},
    "images": [{"name": "agent", "ref": "agent.image"}],
    "pullSecretPaths": {"refList": ["pullSecrets"]},
}
POLICY: dict[str, Any] = {
    "manifest": {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "team-agent-policy", "namespace": "team-agent"},
        "data": {"mode": "enforce"},
    },
    "dependsOn": ["team-agent"],
}


def team(components: dict[str, Any], **doc: Any) -> dict[str, Any]:
    """The EnvironmentConfig team adding (or changing) ``components``; ``doc``: the rest of its document."""
    return ec("team", {"components": components, **doc})


def kinds(result: RenderResult, severity: int) -> list[str]:
    return [r.message for r in result.results if r.severity == severity]


def releases(result: RenderResult) -> dict[str, dict[str, Any]]:
    return {k: v["spec"]["forProvider"] for k, v in desired(result).items() if v["kind"] == "Release"}


def _installed(server: str, configs: list[dict[str, Any]]) -> Cluster:
    cluster = Cluster(server, make_xr("GKE"))
    for _ in range(3):
        cluster.reconcile(*configs)
    return cluster


# ------------------------------------------------------------------ 1. addition


def test_an_added_chart_and_manifest_get_what_generated_components_get(server: str) -> None:
    cluster = Cluster(server, make_xr("GKE"))
    configs = [team({"team-agent": AGENT, "team-agent-policy": POLICY})]
    first = cluster.reconcile(*configs)
    # Gated on the ProviderConfigs, as every remote resource is; the XR says it is not ready.
    assert set(desired(first)) == {"provider-config-helm", "provider-config-kubernetes"}
    assert render_documents(first)[0]["status"]["conditions"][0]["status"] == "False"
    second = cluster.reconcile(*configs)
    got = desired(second)
    agent = got["team-agent"]
    assert agent["metadata"]["annotations"] == {
        "crossplane.io/external-name": "mp-team-agent",
        "servingstack.modelplane.ai/overridden-by": "team",
    }
    assert agent["spec"]["forProvider"]["chart"] == CHART
    assert agent["spec"]["forProvider"]["namespace"] == "team-agent"
    assert got["team-agent-policy"]["spec"]["forProvider"]["manifest"] == POLICY["manifest"]
    # A ProviderConfig Usage each, and what each depends on outlives it.
    for key in ("team-agent", "team-agent-policy"):
        spec = got[f"usage-pc-{key}"]["spec"]
        assert resolve(spec["by"], spec["by"]["apiVersion"], spec["by"]["kind"], got) == [key]
    held = {
        (
            resolve(s["of"], s["of"]["apiVersion"], s["of"]["kind"], got)[0],
            resolve(s["by"], s["by"]["apiVersion"], s["by"]["kind"], got)[0],
        )
        for s in usages(got).values()
        if s["of"]["kind"] != "ProviderConfig"
    }
    assert {("prometheus", "team-agent"), ("team-agent", "team-agent-policy")} <= held
    # Nothing it does not name waits for it or is held by it.
    assert {pair for pair in held if "team-agent" in pair or "team-agent-policy" in pair} == {
        ("prometheus", "team-agent"),
        ("team-agent", "team-agent-policy"),
    }
    status = stack_status(second)
    listed = {c["name"]: c for c in status["components"]}
    assert listed["team-agent"] == {
        "name": "team-agent",
        "kind": "Release",
        "source": "override:team",
        "chart": "team-agent",
        "version": "2.0.0",
        "state": "Managed",
        "rendered": True,
        "overriddenBy": ["team"],
    }
    assert [a["name"] for a in status["added"]] == ["team-agent", "team-agent-policy"]
    assert "added: team-agent, team-agent-policy" in kinds(second, NORMAL)[-1]


def test_readiness_counts_an_added_component(server: str) -> None:
    cluster = Cluster(server, make_xr("GKE"))
    configs = [team({"team-agent": AGENT})]
    cluster.reconcile(*configs)
    cluster.reconcile(*configs)
    cluster.observed["team-agent"]["status"]["conditions"][0]["status"] = "False"
    result = cluster.reconcile(*configs)
    # Crossplane's own check (render_documents derives it as the composite reconciler does) names it.
    condition = next(c for c in render_documents(result)[0]["status"]["conditions"] if c["type"] == "Ready")
    assert condition["status"] == "False" and condition["message"] == "Unready resources: team-agent"


def test_a_later_document_changes_an_added_component() -> None:
    late = ec("late", {"priority": 10, "components": {"team-agent": {"values": {"agent": {"level": "debug"}}}}})
    result = overridden(make_xr("GKE"), team({"team-agent": AGENT}), late)
    assert releases(result)["team-agent"]["values"]["agent"] == {"image": "quay.io/team/agent:2.0.0", "level": "debug"}
    annotations = desired(result)["team-agent"]["metadata"]["annotations"]
    assert annotations["servingstack.modelplane.ai/overridden-by"] == "team,late"
    again = ec("late", {"priority": 10, "components": {"team-agent": {"chart": CHART, "namespace": "x"}}})
    message = fatal(make_xr("GKE"), team({"team-agent": AGENT}), again)
    assert "components.team-agent.chart: team-agent is added by team" in message


# ------------------------------------------------------------------ 2. collisions


@pytest.mark.parametrize(
    ("key", "entry", "named"),
    [
        ("cert-manager", {"chart": CHART, "namespace": "x"}, "the generated component cert-manager of stacks"),
        # A key of another stack only: still refused, on every stack.
        ("amd-gpu-operator", {"chart": CHART, "namespace": "x"}, "existing-amd, vultr-amd"),
        ("gateway-proxy", {"manifest": {"spec": {}}, "dependsOn": ["gateway"]}, "components.gateway-proxy.dependsOn"),
    ],
)
def test_an_added_key_colliding_with_a_generated_one_is_fatal_naming_both(
    server: str, key: str, entry: dict[str, Any], named: str
) -> None:
    message = Cluster(server, make_xr("GKE")).refused(team({key: entry}))
    assert f"adds a component under the key {key}, which is the generated component {key}" in message
    assert named in message


def test_a_release_name_taken_is_fatal_naming_both(server: str) -> None:
    cluster = _installed(server, [])
    message = cluster.refused(team({"team-agent": {**AGENT, "releaseName": "mp-cert-manager"}}))
    assert "components.team-agent: its Helm release name mp-cert-manager is also cert-manager's" in message
    twice = {"a-agent": AGENT, "b-agent": AGENT}
    message = cluster.refused(team(twice))
    assert "components.b-agent: its Helm release name mp-team-agent is also a-agent's" in message


@pytest.mark.parametrize(
    ("entry", "said"),
    [
        ({**AGENT, "dependsOn": ["no-such"]}, "components.team-agent.dependsOn: no-such: no such component"),
        ({**AGENT, "version": "1"}, "version: an added chart (chart) takes chart"),
        ({"chart": CHART}, "namespace: an added chart needs the namespace"),
        ({"manifest": {"kind": "ConfigMap"}}, "components.team-agent.manifest.apiVersion: an added raw manifest"),
        ({**AGENT, "releaseName": "Not_A_Name"}, "releaseName"),
    ],
)
def test_a_malformed_addition_is_fatal_naming_the_field(entry: dict[str, Any], said: str) -> None:
    assert said in fatal(make_xr("GKE"), team({"team-agent": entry}))


def test_reserved_keys_and_cycles_are_fatal() -> None:
    assert "not starting with provider-config-, usage-, driver-" in fatal(
        make_xr("GKE"), team({"usage-x": {"chart": CHART, "namespace": "x"}})
    )
    cycle = {"a-one": {**AGENT, "releaseName": "a", "dependsOn": ["b-two"]}, "b-two": {**AGENT, "dependsOn": ["a-one"]}}
    assert "a dependency cycle: a-one -> b-two -> a-one" in fatal(make_xr("GKE"), team(cycle))


# ------------------------------------------------------------------ 3. registry rules, strict, pull secrets


def test_mirrors_rewrite_an_added_chart_and_its_declared_images_and_write_its_pull_secrets(server: str) -> None:
    mirror = mirror_all()
    mirror["registry"]["imagePullSecrets"] = ["mirror-pull"]
    cluster = Cluster(server, make_xr("GKE"))
    configs = [team({"team-agent": AGENT, "team-agent-policy": _with_pod(POLICY)}, **mirror)]
    cluster.reconcile(*configs)
    result = cluster.reconcile(*configs)
    agent = releases(result)["team-agent"]
    assert agent["chart"]["repository"] == "oci://mirror.example.com/charts/charts"
    assert agent["values"]["agent"]["image"] == "mirror.example.com/hub/team/agent:2.0.0"
    assert agent["values"]["pullSecrets"] == [{"name": "mirror-pull"}]
    pod = desired(result)["team-agent-policy"]["spec"]["forProvider"]["manifest"]["spec"]["template"]["spec"]
    assert pod["containers"][0]["image"] == "mirror.example.com/hub/library/busybox:1.37"
    assert pod["imagePullSecrets"] == [{"name": "mirror-pull"}]


def _with_pod(entry: dict[str, Any]) -> dict[str, Any]:
    """The policy entry as a Deployment (a pod template) rather than a ConfigMap."""
    out = copy.deepcopy(entry)
    out["manifest"] = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "team-agent-policy", "namespace": "team-agent"},
        "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "busybox:1.37"}]}}},
    }
    return out


def test_strict_refuses_an_unmirrored_added_chart_and_image(server: str) -> None:
    cluster = _installed(server, [])
    strict_images_only = {
        "registry": {
            "images": [{"from": "*", "to": "mirror.example.com/hub"}],
            "strict": True,
            "allowedRegistries": ["mirror.example.com"],
        }
    }
    message = cluster.refused(team({"team-agent": AGENT}, **strict_images_only))
    assert "team-agent chart: oci://registry.team.example/charts" in message
    # An image string the document did not declare is found and refused all the same.
    sneaky = copy.deepcopy(AGENT)
    sneaky["values"]["sidecar"] = {"image": "quay.io/team/sidecar:1.0"}
    message = cluster.refused(team({"team-agent": sneaky}, **mirror_all()))
    assert "team-agent spec.forProvider.values.sidecar.image: quay.io/team/sidecar:1.0" in message
    # And an added chart that does not say which images it runs cannot be vouched for.
    undeclared = {k: v for k, v in AGENT.items() if k != "images"}
    message = cluster.refused(team({"team-agent": undeclared}, **mirror_all()))
    assert "components.team-agent.images: registry.strict" in message


def test_strict_passes_a_mirrored_added_chart() -> None:
    result = overridden(make_xr("GKE"), team({"team-agent": AGENT}, **mirror_all()))
    assert not [r for r in result.results if r.severity == 1]


# ------------------------------------------------------------------ 4. fail closed


def test_a_missing_document_keeps_its_addition(server: str) -> None:
    cluster = Cluster(server, make_xr("GKE"))
    configs = [team({"team-agent": AGENT, "team-agent-policy": POLICY})]
    cluster.reconcile(*configs)
    before = desired(cluster.reconcile(*configs))
    after = cluster.reconcile()  # the EnvironmentConfig is gone
    assert desired(after) == before
    assert any(w.startswith("EnvironmentConfig team applied at the last reconcile") for w in kinds(after, WARNING))
    assert cluster.problems == []


def test_an_entry_dropped_from_a_document_in_force_is_kept_and_a_rename_says_so(server: str) -> None:
    cluster = Cluster(server, make_xr("GKE"))
    cluster.reconcile(team({"team-agent": AGENT}))
    before = desired(cluster.reconcile(team({"team-agent": AGENT})))
    renamed = cluster.reconcile(team({"team-agent-v2": {**AGENT, "releaseName": "team-agent-v2"}}))
    got = desired(renamed)
    assert got["team-agent"] == before["team-agent"]  # kept: nothing uninstalled
    assert "team-agent-v2" in got
    [warning] = [w for w in kinds(renamed, WARNING) if "team-agent" in w]
    assert "components.team-agent: added by team at the last reconcile, and no document in force adds it" in warning
    assert "if team-agent was renamed to team-agent-v2: a renamed key is the removal of the old key plus" in warning
    # Still kept on the next reconcile: the memory carries it forward.
    again = cluster.reconcile(team({"team-agent-v2": {**AGENT, "releaseName": "team-agent-v2"}}))
    assert desired(again)["team-agent"] == before["team-agent"]


def test_a_pruned_memory_of_additions_is_fatal() -> None:
    xr = make_xr("GKE")
    first = overridden(xr, team({"team-agent": AGENT}))
    xr["status"] = render_documents(first)[0]["status"]
    xr["status"]["stack"]["components"] = [
        {"name": "team-agent", "source": "override:team", "state": "Managed", "rendered": True}
    ]
    del xr["status"]["stack"]["added"]
    assert "status.stack.components lists team-agent, which team added" in fatal(xr, team({"team-agent": AGENT}))


# ------------------------------------------------------------------ 5. explicit removal, in order


CHAIN = {"team-agent": AGENT, "team-agent-policy": POLICY}


def test_removed_additions_leave_in_dependency_order(server: str) -> None:
    cluster = _installed(server, [team(CHAIN)])
    removed = {k: {**v, "state": "Removed"} for k, v in CHAIN.items()}
    departures = cluster.converge(team(removed))
    assert cluster.problems == []
    order = {k: i for i, step in enumerate(departures) for k in step}
    assert order["team-agent-policy"] < order["usage-team-agent-by-team-agent-policy"] < order["team-agent"]
    assert order["team-agent"] < order["usage-prometheus-by-team-agent"]
    assert "prometheus" in cluster.observed  # what it depended on stays
    # Gone, it is no longer remembered; the entries saying Removed can stay or go.
    assert "added" not in cluster.xr["status"]["stack"]
    cluster.reconcile(team({"team-agent": {"state": "Removed"}}))
    assert "team-agent" not in cluster.observed


def test_an_entry_shrunk_to_removed_takes_the_remembered_addition_out(server: str) -> None:
    cluster = _installed(server, [team(CHAIN)])
    departures = cluster.converge(team({k: {"state": "Removed"} for k in CHAIN}))
    assert cluster.problems == []
    order = {k: i for i, step in enumerate(departures) for k in step}
    assert order["team-agent-policy"] < order["team-agent"]
    assert not {"team-agent", "team-agent-policy"} & set(cluster.observed)


def test_removing_an_addition_under_one_that_stays_is_refused(server: str) -> None:
    cluster = _installed(server, [team(CHAIN)])
    with pytest.raises(RenderError, match=r"components\.team-agent\.state: Removed is refused while components"):
        cluster.reconcile(team({**CHAIN, "team-agent": {**AGENT, "state": "Removed"}}))


@pytest.mark.parametrize("how", ["tombstone", "annotation"])
def test_a_retired_document_takes_its_additions_out_in_order(server: str, how: str) -> None:
    cluster = _installed(server, [team(CHAIN)])
    if how == "tombstone":
        configs = [ec("team", {"retired": True})]
    else:
        configs = []
        cluster.xr["metadata"]["annotations"] = {RETIRE_ANNOTATION: "team"}
    departures = cluster.converge(*configs)
    assert cluster.problems == []
    order = {k: i for i, step in enumerate(departures) for k in step}
    assert order["team-agent-policy"] < order["team-agent"]
    assert not {"team-agent", "team-agent-policy"} & set(cluster.observed)
    assert "prometheus" in cluster.observed


def test_a_removed_addition_keeps_its_provider_config_until_gone(server: str) -> None:
    cluster = _installed(server, [team({"team-agent": AGENT})])
    result = cluster.reconcile(team({"team-agent": {**AGENT, "state": "Removed"}}))
    got = desired(result)
    assert "team-agent" not in got and "usage-pc-team-agent" in got
    assert [u for u in usages(got) if api_kind(got[u]) == USAGE and "team-agent" in u]


# ------------------------------------------------------------------ 6. the substitution examples


def lab_xr() -> dict[str, Any]:
    return load_docs(EXAMPLE / "xr-existing.yaml")[0]


def test_byo_issuer_substitutes_cert_manager_on_a_byo_cluster(server: str) -> None:
    cluster = Cluster(server, lab_xr())
    for _ in range(3):
        result = cluster.reconcile(BYO_ISSUER)
    got = desired(result)
    assert "cert-manager" not in got  # the cluster's own: never installed by us
    issuer = got["team-issuer"]["spec"]["forProvider"]
    assert issuer["chart"]["name"] == "team-issuer" and issuer["namespace"] == "cert-manager"
    # cert-manager is not ours to hold here: no Usage of it, and nothing else waits for the issuer.
    assert not [k for k in got if k.startswith("usage-") and "team-issuer" in k and k != "usage-pc-team-issuer"]
    listed = {c["name"]: c["state"] for c in stack_status(result)["components"]}
    assert listed["cert-manager"] == "Unmanaged" and listed["team-issuer"] == "Managed"
    assert k8s_schema.validate_documents(render_documents(result)[1:], require_covered=True) == []


def test_byo_issuer_holds_a_cert_manager_the_function_installed(server: str) -> None:
    cluster = Cluster(server, lab_xr())
    for _ in range(3):
        cluster.reconcile()  # installed as generated first
    result = cluster.reconcile(BYO_ISSUER)
    result = cluster.reconcile(BYO_ISSUER)
    got = desired(result)
    assert got["cert-manager"]["spec"]["managementPolicies"] == ["Observe"]
    assert "usage-cert-manager-by-team-issuer" in got


def test_serving_pool_replaces_leader_worker_set_with_the_teams_operator(server: str) -> None:
    cluster = Cluster(server, POOL_XR)
    for _ in range(3):
        cluster.reconcile()
    assert "leader-worker-set" in cluster.observed
    departures = cluster.converge(SERVING_POOL)
    assert cluster.problems == []
    assert ["leader-worker-set"] in departures
    assert "team-serving-operator" in cluster.observed and "leader-worker-set" not in cluster.observed
    body = cluster.observed["team-serving-operator"]
    assert body["metadata"]["annotations"]["crossplane.io/external-name"] == "team-serving"
    assert "usage-cert-manager-by-team-serving-operator" in cluster.observed
    rendered = render_documents(cluster.reconcile(SERVING_POOL))[1:]
    assert k8s_schema.validate_documents(rendered, require_covered=True) == []


def test_serving_pool_is_refused_while_a_component_still_depends_on_what_it_removes(server: str) -> None:
    cluster = Cluster(server, POOL_XR)
    for _ in range(3):
        cluster.reconcile(SERVING_POOL)
    pool = copy.deepcopy(SERVING_POOL)
    pool["data"]["servingStack"]["components"]["cert-manager"] = {"state": "Removed"}
    message = cluster.refused(pool)
    assert "components.cert-manager.state: Removed is refused while components that depend on cert-manager" in message
    assert "gpu-operator (Managed)" in message and "team-serving-operator (Managed)" in message


def test_the_serving_pool_applies_only_to_its_pool() -> None:
    result = overridden(make_xr("GKE"), SERVING_POOL)
    assert "team-serving-operator" not in desired(result)
    assert "leader-worker-set" in desired(result)


# ------------------------------------------------------------------ 7. validate, images, explain, status


def _write(tmp_path: Path, name: str, *docs: dict[str, Any]) -> str:
    path = tmp_path / name
    path.write_text(yaml.safe_dump_all(docs, sort_keys=False))
    return str(path)


def test_images_lists_an_added_chart_and_its_images_moved_by_the_mirror(tmp_path: Path, invoke: Invoke) -> None:
    pool = str(SUBSTITUTION / "serving-pool.yaml")
    out = invoke("images", "--xr", str(SUBSTITUTION / "xr-serving-pool.yaml"), "-e", pool)
    assert out.exit_code == 0, out.output
    assert "chart oci://registry.team.example/charts team-serving-operator 1.2.0\n" in out.stdout
    assert "image ghcr.io/example-team/serving-operator:1.2.0\n" in out.stdout
    assert "chart oci://registry.k8s.io/lws/charts" not in out.stdout  # Removed: not installed
    mirror = _write(tmp_path, "mirror.yaml", ec("mirror", mirror_all()))
    out = invoke(
        "images", "--xr", str(SUBSTITUTION / "xr-serving-pool.yaml"), "-e", pool, "-e", mirror, "--format", "pairs"
    )
    assert out.exit_code == 0, out.output
    assert (
        "chart oci://registry.team.example/charts team-serving-operator 1.2.0 -> "
        "oci://mirror.example.com/charts/charts team-serving-operator 1.2.0\n"
    ) in out.stdout
    moved = "mirror.example.com/hub/example-team/serving-operator:1.2.0"
    assert f"image ghcr.io/example-team/serving-operator:1.2.0 -> {moved}\n" in out.stdout


def test_validate_checks_additions_on_every_stack(tmp_path: Path, invoke: Invoke) -> None:
    out = invoke("validate", "-e", str(SUBSTITUTION))
    assert out.exit_code == 0, out.output
    clash = _write(tmp_path, "clash.yaml", team({"team-agent": {**AGENT, "releaseName": "mp-lws"}}))
    out = invoke("validate", "-e", clash)
    assert out.exit_code == 1
    assert (
        "fatal: stack gke-nvidia: EnvironmentConfig team: data.servingStack.components.team-agent: its Helm "
        in out.stdout
    )
    sneaky = copy.deepcopy(AGENT)
    sneaky["values"]["sidecar"] = {"image": "quay.io/team/sidecar:1.0"}
    unmirrored = _write(tmp_path, "strict.yaml", team({"team-agent": sneaky}, **mirror_all()))
    out = invoke("validate", "-e", unmirrored)
    assert out.exit_code == 1
    assert "team-agent spec.forProvider.values.sidecar.image: quay.io/team/sidecar:1.0" in out.stdout


def test_validate_against_a_serving_stack_says_a_rename_is_a_removal_plus_an_addition(
    tmp_path: Path, invoke: Invoke
) -> None:
    xr = make_xr("GKE")
    xr["status"] = render_documents(overridden(xr, team({"team-agent": AGENT})))[0]["status"]
    renamed = _write(tmp_path, "renamed.yaml", team({"team-agent-v2": {**AGENT, "releaseName": "v2"}}))
    out = invoke("validate", "-e", renamed, "--xr", _write(tmp_path, "xr.yaml", xr))
    assert out.exit_code == 0, out.output
    assert "if team-agent was renamed to team-agent-v2: a renamed key is the removal of the old key plus" in out.stdout
    assert out.stdout.startswith("warning: ServingStack prod-eu-1")


def test_explain_credits_an_added_component_to_its_document(invoke: Invoke) -> None:
    out = invoke(
        "explain", str(SUBSTITUTION / "xr-serving-pool.yaml"), "--required-resources", str(SUBSTITUTION), "-O", "yaml"
    )
    assert out.exit_code == 0, out.output
    [operator] = [c for c in yaml.safe_load(out.stdout)["components"] if c["name"] == "team-serving-operator"]
    assert operator["source"] == "override:serving-pool" and operator["changedBy"] == ["serving-pool"]
    assert {f["from"] for f in operator["fields"]} == {"serving-pool"}


def test_status_with_additions_converts_as_the_whole_status(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = recorded(monkeypatch)
    xr = make_xr("GKE")
    first = overridden(xr, team(CHAIN))
    xr["status"] = render_documents(first)[0]["status"]
    overridden(xr, team({"team-agent": AGENT}))  # the policy kept from memory
    assert len(calls) >= 2
    assert_converted_as_the_whole_status(calls)


def test_status_stack_added_is_valid_for_the_xrd(xr_index: k8s_schema.CRDIndex) -> None:
    xr = make_xr("GKE")
    status = render_documents(overridden(xr, team(CHAIN)))[0]["status"]
    status.pop("conditions")
    assert status["stack"]["added"]
    assert xr_index.validate({**xr, "status": status}) == []


# ------------------------------------------------------------------ 8. real Helm


def test_the_byo_issuer_installs_under_real_helm_as_a_cluster_issuer(server: str, example_charts: Charts) -> None:
    cluster = Cluster(server, lab_xr())
    for _ in range(3):
        result = cluster.reconcile(BYO_ISSUER)
    got = desired(result)
    [issuer] = [r.object for r in render_release(got["team-issuer"], example_charts)]
    assert issuer["kind"] == "ClusterIssuer"
    assert issuer["metadata"]["name"] == "team-ca" and issuer["spec"] == {"ca": {"secretName": "team-ca-keypair"}}
    assert issuer["metadata"]["labels"]["app.kubernetes.io/instance"] == "mp-team-issuer"


def test_real_helm_refuses_the_issuer_without_its_ca_secret(example_charts: Charts) -> None:
    doc = copy.deepcopy(BYO_ISSUER)
    del doc["data"]["servingStack"]["components"]["team-issuer"]["values"]["issuer"]["caSecretName"]
    release = desired(overridden(lab_xr(), doc))["team-issuer"]
    with pytest.raises(HelmError, match=r"issuer\.caSecretName: the Secret holding the team's CA"):
        render_release(release, example_charts)


def test_the_serving_operator_installs_under_real_helm_from_the_mirror_with_its_pull_secret(
    server: str, example_charts: Charts
) -> None:
    mirror = mirror_all()
    mirror["registry"]["imagePullSecrets"] = ["mirror-pull"]
    configs = [SERVING_POOL, ec("mirror", mirror)]
    cluster = Cluster(server, POOL_XR)
    for _ in range(3):
        result = cluster.reconcile(*configs)
    [deployment] = [r.object for r in render_release(desired(result)["team-serving-operator"], example_charts)]
    assert deployment["kind"] == "Deployment"
    assert deployment["metadata"] == {
        "name": "team-serving",
        "namespace": "team-serving",
        "labels": {"app.kubernetes.io/name": "team-serving-operator", "app.kubernetes.io/instance": "team-serving"},
    }
    pod = deployment["spec"]["template"]["spec"]
    # What Helm renders is what `function images` says the cluster pulls, and the mirror's pull secret.
    assert [c["image"] for c in pod["containers"]] == ["mirror.example.com/hub/example-team/serving-operator:1.2.0"]
    assert pod["imagePullSecrets"] == [{"name": "mirror-pull"}]
    assert k8s_schema.validate_documents([deployment], require_covered=False) == []
