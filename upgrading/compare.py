"""UPGRADING.md: each generated stack compared with Modelplane v0.3.1, each Dynamo stack with PR #406.

Per generated stack, every composed resource key of Modelplane v0.3.1
(``facts/v0.3.1.yaml``) is compared with what the function renders for the
stack today: it stays, changes version or chart, is added or is removed, and
what that does on a live cluster. For a Release both compose, the objects are
compared as real Helm renders them (:mod:`upgrading.objects`): v0.3.1's, recorded
in ``facts/v0.3.1-objects.yaml`` (:mod:`upgrading.refresh`), against those Helm
renders from ``facts/helm/`` with the stack's values; every object renamed,
removed, added or moved is listed. So this needs real Helm (helm-python-sdk, a
dev dependency; the function's runtime install has no use for it). The
control-plane versions come from ``facts/control-plane.yaml``.
tests/test_upgrading.py fails when the committed file is not what this writes
(``python -m upgrading [--check]``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import yaml
from crossplane.function import resource
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from google.protobuf.struct_pb2 import Struct

from function import stack as stacks
from function.bodies import EXTERNAL_NAME
from function.compose import HELM_PC, KUBERNETES_PC, Observed, provider_config_usage_key, render
from function.encode import struct_bytes
from function.helm import Charts, render_release
from function.model import ServingStack
from function.overrides import Collected, plan
from function.paths import get_path
from upgrading.objects import CRDS_DIR, HOOK, TEMPLATE, Difference, Identity, compare_objects, identities

REPO = Path(__file__).resolve().parents[1]
FACTS = REPO / "facts"
OUT = REPO / "UPGRADING.md"
V031_OBJECTS = FACTS / "v0.3.1-objects.yaml"

STAYS = "stays"
VERSION = "changes version"
CHART = "changes chart"
RENAMES = "renames objects"
REMOVES_OBJECTS = "removes objects"
ADDS_OBJECTS = "adds objects"
MOVES_OBJECTS = "moves objects"
ADDED = "added"
REMOVED = "removed"


def load_yaml(path: Path) -> Any:
    # libyaml where it is installed: the chart inventories are large.
    return yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


@dataclass(frozen=True)
class Row:
    key: str
    before: str
    after: str
    changes: tuple[str, ...]
    effect: str
    objects: Difference | None = None  # a continuing Release: v0.3.1's objects against this stack's


@dataclass
class Comparison:
    stack: stacks.Stack
    rows: list[Row] = field(default_factory=list)

    def keys(self, change: str) -> list[str]:
        return [r.key for r in self.rows if change in r.changes]


@cache
def v031_objects() -> dict[str, tuple[Identity, ...]]:
    """Per v0.3.1 Release key, the objects Helm rendered for it (facts/v0.3.1-objects.yaml)."""
    releases = load_yaml(V031_OBJECTS)["releases"]
    return {k: tuple(Identity.from_record(o) for o in r["objects"]) for k, r in releases.items()}


def before_objects(key: str, old: dict[str, Any]) -> tuple[Identity, ...]:
    """What Helm rendered for a Release the earlier release composed.

    v0.3.1's Releases are recorded (their charts at v0.3.1's versions are not
    here). A Release only PR #406 composes (Grove, KAI) is at a version packaged
    here: Helm renders it from that chart with PR #406's values (none: its
    fn.py compose_grove / compose_kai_scheduler set no values) and release name.
    """
    recorded = v031_objects().get(key)
    if recorded is not None:
        return recorded
    body = {
        "metadata": {"annotations": {EXTERNAL_NAME: f"mp-{old['chart']}"}},
        "spec": {
            "forProvider": {
                "chart": {"name": old["chart"], "repository": old["repository"], "version": old["version"]},
                "namespace": old["namespace"],
                "values": old.get("values") or {},
            }
        },
    }
    return today_objects(body)


def today_objects(body: dict[str, Any]) -> tuple[Identity, ...]:
    """The objects Helm renders for a composed Release from facts/helm/."""
    return _rendered(json.dumps(body, sort_keys=True))


@cache  # the stacks share most Releases: each is rendered once
def _rendered(body: str) -> tuple[Identity, ...]:
    return tuple(identities(render_release(json.loads(body), _charts())))


def unpackaged_files(chart: dict[str, Any]) -> tuple[str, ...]:
    """The files the chart's release adds that its package in facts/helm/ lacks (SOURCES.yaml ``missingFiles``)."""
    record = _packages().get(f"{chart['name']}-{chart['version']}.tgz") or {}
    return tuple((record.get("release") or {}).get("missingFiles") or ())


@cache
def _packages() -> dict[str, Any]:
    packages: dict[str, Any] = load_yaml(FACTS / "helm" / "SOURCES.yaml")
    return packages


@cache
def _charts() -> Charts:
    return Charts(FACTS / "helm")


def _render(stack: stacks.Stack) -> dict[str, dict[str, Any]]:
    """What the function composes for the stack once its ProviderConfigs exist."""
    xr = ServingStack.model_validate(
        {
            "apiVersion": "infrastructure.modelplane.ai/v1alpha1",
            "kind": "ServingStack",
            "metadata": {"name": "upgrade", "namespace": "default"},
            "spec": {
                "cloud": stack.cloud,
                "accelerator": stack.accelerator,
                "secrets": [{"type": "Kubeconfig", "name": "k", "key": "k"}],
            },
        }
    )
    observed = Observed({HELM_PC: fnv1.Resource(), KUBERNETES_PC: fnv1.Resource()})
    desired, _ = render(xr, observed, plan(stack, Collected()).planned)
    # As Crossplane reads them: through protobuf (numbers are doubles).
    return {k: resource.struct_to_dict(Struct.FromString(struct_bytes(c.body))) for k, c in desired.items()}


def _release_row(key: str, old: dict[str, Any], body: dict[str, Any], comp: stacks.Component) -> Row:
    chart = body["spec"]["forProvider"]["chart"]
    release = body["metadata"]["annotations"][EXTERNAL_NAME]
    old_release = f"mp-{old['chart']}"  # v0.3.1 named every release mp-<chart>
    before = f"{old['chart']} {old['version']} ({old_release} in {old['namespace']})"
    after = f"{chart['name']} {chart['version']} ({release} in {comp.namespace})"
    changes: list[str] = []
    effects: list[str] = []
    if release != old_release or comp.namespace != old["namespace"]:
        # Helm cannot rename or move a release: the old one is left behind.
        changes.append("changes release")
        effects.append(
            f"a new Helm release {release} in {comp.namespace} is installed beside {old_release} in "
            f"{old['namespace']}, which nothing uninstalls"
        )
    if chart["name"] != old["chart"] or chart["repository"] != old["repository"]:
        changes.append(CHART)
        effects.append(
            f"Helm upgrades {release} from chart {old['chart']} ({old['repository']}) to {chart['name']} "
            f"({chart['repository']}): objects only the old chart rendered are deleted, the new chart's created"
        )
    elif chart["version"] != old["version"]:
        changes.append(VERSION)
        crd_job = get_path(body["spec"]["forProvider"].get("values") or {}, "crds.upgradeJob.enabled") is True
        effects.append(
            f"Helm upgrades {release} in place from {old['version']} to {chart['version']}; workloads roll "
            + (
                "(the chart's CRD upgrade Job applies its CRDs first, a pre-upgrade hook)"
                if crd_job
                else "(Helm never upgrades CRDs a chart keeps in its crds/ directory)"
            )
        )
    objects = None
    if not changes or changes[0] != "changes release":
        objects = compare_objects(before_objects(key, old), today_objects(body), unpackaged_files(chart))
        for change, found in (
            (RENAMES, objects.renamed),
            (REMOVES_OBJECTS, objects.removed),
            (ADDS_OBJECTS, objects.added),
            (MOVES_OBJECTS, objects.moved),
        ):
            if found:
                changes.append(change)
        effects.append(_objects_effect(objects))
    return Row(key, before, after, tuple(changes) or (STAYS,), "; ".join(effects), objects)


def _objects_effect(objects: Difference) -> str:
    counts = [
        f"{len(found)} {what}"
        for what, found in (
            ("renamed", objects.renamed),
            ("removed", objects.removed),
            ("added", objects.added),
            ("moved", objects.moved),
        )
        if found
    ]
    told = f"{len(objects.same)} the same, {', '.join(counts)} (listed below)" if counts else "all the same"
    olds = len(objects.old) + len(objects.unpackaged)
    text = f"Helm renders {olds} objects from v0.3.1's chart and {len(objects.new)} from this one: {told}"
    if objects.unpackaged:
        text += f"; {len(objects.unpackaged)} not compared (listed below)"
    return text


def _object_desc(body: dict[str, Any], comp: stacks.Component | None) -> str:
    manifest = body["spec"]["forProvider"]["manifest"]
    meta = manifest.get("metadata") or {}
    where = f" in {meta['namespace']}" if meta.get("namespace") else ""
    from_xr = comp.xr_fields.get("metadata.name") if comp else None
    return f"{manifest['kind']} {f'<spec.{from_xr}>' if from_xr else meta.get('name')}{where}"


def _old_object_desc(old: dict[str, Any], key: str) -> str:
    name = old.get("name") or key.removeprefix("gaie-crd-")
    where = f" in {old['namespace']}" if old.get("namespace") else ""
    return f"{old['object']} {name}{where}"


def _object_row(key: str, old: dict[str, Any], body: dict[str, Any], comp: stacks.Component) -> Row:
    before, after = _old_object_desc(old, key), _object_desc(body, comp)
    if before == after:
        return Row(key, before, after, (STAYS,), "same object; provider-kubernetes applies this stack's manifest to it")
    return Row(key, before, after, (RENAMES,), f"provider-kubernetes deletes {before} and creates {after}")


def _added(key: str, body: dict[str, Any], comp: stacks.Component | None) -> Row:
    if body["kind"] == "Release":
        chart = body["spec"]["forProvider"]["chart"]
        release = body["metadata"]["annotations"][EXTERNAL_NAME]
        namespace = body["spec"]["forProvider"]["namespace"]
        return Row(
            key,
            "—",
            f"{chart['name']} {chart['version']} ({release} in {namespace})",
            (ADDED,),
            f"Helm installs {release} in {namespace}",
        )
    if body["kind"] == "Object":
        desc = _object_desc(body, comp)
        return Row(key, "—", desc, (ADDED,), f"provider-kubernetes creates {desc}")
    return Row(key, "—", body["kind"], (ADDED,), "a Usage is created on the control plane; the cluster is untouched")


def _removed(key: str, old: dict[str, Any] | None) -> Row:
    if old is None:
        return Row(key, "Usage", "—", (REMOVED,), "the Usage is deleted on the control plane; the cluster is untouched")
    if old["kind"] == "Release":
        release = f"mp-{old['chart']}"
        return Row(
            key,
            f"{old['chart']} {old['version']} ({release} in {old['namespace']})",
            "—",
            (REMOVED,),
            f"Crossplane deletes the Release: Helm uninstalls {release}",
        )
    desc = _old_object_desc(old, key)
    return Row(key, desc, "—", (REMOVED,), f"provider-kubernetes deletes {desc}")


def compare(stack: stacks.Stack, v031: dict[str, Any]) -> Comparison:
    """Every composed resource key of v0.3.1 and of the stack, and what happens to it."""
    rendered = _render(stack)
    comps = {c.key: c for c in stack.components}
    old_components: dict[str, dict[str, Any]] = v031["components"]
    # Each Release and Object has its usage-pc-<key> Usage (v0.3.1's compose-usages,
    # this function's own now): it comes and goes with its consumer.
    old_keys = [HELM_PC, KUBERNETES_PC, *old_components, *v031["usages"]["keys"]]
    new_keys = [k for k in rendered if not k.startswith(provider_config_usage_key(""))]
    result = Comparison(stack)
    for key in sorted(set(old_keys) | set(new_keys)):
        old, body = old_components.get(key), rendered.get(key)
        if key in (HELM_PC, KUBERNETES_PC):
            result.rows.append(Row(key, "ProviderConfig", "ProviderConfig", (STAYS,), "nothing changes"))
        elif body is None:
            result.rows.append(_removed(key, old))
        elif old is None:
            result.rows.append(
                _added(key, body, comps.get(key))
                if key not in old_keys
                else Row(key, "Usage", "Usage", (STAYS,), "nothing changes")
            )
        elif body["kind"] == "Release":
            result.rows.append(_release_row(key, old, body, comps[key]))
        else:
            result.rows.append(_object_row(key, old, body, comps[key]))
    return result


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _control_plane(facts: dict[str, Any]) -> list[str]:
    lines = ["| component | minimum | why |", "|---|---|---|"]
    for name in ("crossplane", "provider-helm", "provider-kubernetes"):
        entry = facts[name]
        lines.append(f"| {name} | {entry['minimum']} | {_cell(' '.join(str(entry['why']).split()))} |")
    lines.append("")
    lines.append("Cloud identities on the ProviderConfigs need more recent providers:")
    lines.append("")
    for name in ("provider-helm", "provider-kubernetes"):
        for identity, version in facts[name].get("identities", {}).items():
            lines.append(f"- {name}, `{identity}`: {version}")
    return lines


ROLLOUT = """\
1. Upgrade Crossplane and the providers to the versions above (the v0.3.1 function keeps working on them).
2. Apply the new XRD (`example/xrd.yaml`). It keeps v0.3.1's `spec.nvidiaDriverRoot` and `spec.versions`
   (deprecated) and no longer requires anything v0.3.1 ServingStacks lack, so stored ServingStacks stay valid
   and the InferenceCluster's server-side apply keeps passing.
3. Make the InferenceCluster composition set `spec.cloud` on the ServingStacks it writes. Until it does, the
   function infers the cloud where the old fields tell it (a Google identity with GKE's driver root: GKE; an
   AWS identity: EKS; a Nebius identity: Nebius) with a Warning, and returns a Fatal asking for `spec.cloud`
   for the kubeconfig-only ones (v0.3.1's EKS, AKS, Vultr and Existing clusters): Crossplane then keeps the
   last applied state and nothing on the cluster changes. A `spec.versions` pin other than v0.3.1's default
   is a Fatal too: carry it as an EnvironmentConfig version hold or drop it.
4. Review the tables below for the clusters' stacks, and docs/upgrading-notes.md for what a change does on a
   live cluster where the tables cannot say it (the DRA driver's chart switch needs a maintenance window).
   Where a component renames objects or changes chart, plan the gap, or mark the component `Unmanaged` in an
   EnvironmentConfig for the clusters that must not move yet.
5. Install the new Function package and point the ServingStack Composition's step at it, with the Input's
   `spec.secrets.allowedNamespaces` naming the namespace of the Nebius ClusterProviderConfig's credentials
   Secret (`crossplane-system` in v0.3.1's guide; `example/composition.yaml` allows it): a Nebius ServingStack
   whose identity sits elsewhere than its own namespace is a Fatal otherwise. Remove the
   `compose-usages` step: this function composes the same `usage-pc-<key>` Usages (same keys, same
   `modelplane.ai/usage-consumer` label), so clusters keep their Usages; left in place, that step warns about
   each one on every reconcile.
6. Watch the first clusters: the XR stays not Ready until every component is up again."""


OBJECTS_INTRO = """\
Both rendered by real Helm: v0.3.1's chart with v0.3.1's values, release name and namespace
(`facts/v0.3.1-objects.yaml`), and the stack's chart with its values (`facts/helm/`). Objects are
compared by kind, namespace (as the chart writes it; Helm puts a namespaced object written without one in
the release's) and name. A rename is an object of the same kind, namespace and template whose name alone
differs. What the upgrade does: an object of the templates that is removed is deleted, an added one is
created, a renamed one is deleted and created (a gap while it starts; a cluster-scoped new name collides
with another install of the chart: Helm refuses, "invalid ownership metadata"). A CRD in a chart's `crds/`
directory is installed on the first install only: an upgrade never installs, changes or deletes one. A
hook (`helm.sh/hook`) is created when its event fires and removed by its delete policy, not by the upgrade.
A moved object is the same object in another of these three places."""

#: Per difference and where the object is (template, crds/ or hook): what the upgrade does with it.
_EFFECTS = {
    ("renamed", TEMPLATE): "renamed: Helm deletes the old and creates the new",
    ("renamed", CRDS_DIR): "renamed in crds/: the old CRD stays, the new one is not installed by the upgrade",
    ("renamed", HOOK): "renamed hooks: the new one runs at its events",
    ("removed", TEMPLATE): "removed: Helm deletes them",
    ("removed", CRDS_DIR): "removed from crds/: they stay, an upgrade deletes no crds/ CRD",
    ("removed", HOOK): "hooks no longer rendered: what they created stays as their delete policy left it",
    ("added", TEMPLATE): "added: Helm creates them",
    ("added", CRDS_DIR): "added in crds/: the upgrade does not install them",
    ("added", HOOK): "hooks added: they run at their events",
}
_MOVES = {
    (TEMPLATE, CRDS_DIR): "Helm deletes it (no longer in the manifest) and does not install it again",
    (CRDS_DIR, TEMPLATE): "Helm refuses the upgrade: it exists without the release's ownership metadata",
    (TEMPLATE, HOOK): "Helm deletes it, then creates it again when the hook fires",
    (HOOK, TEMPLATE): "Helm creates it in the manifest; refused while the hook's object is still there",
    (CRDS_DIR, HOOK): "the CRD stays; the hook applies it at its events",
    (HOOK, CRDS_DIR): "the CRD stays; the upgrade does not install it",
}
#: Deleting a CustomResourceDefinition deletes every object of its kind on the cluster.
_CRD_DELETED = "; a deleted CRD takes every object of its kind with it"


def render_markdown(
    comparisons: list[Comparison],
    v031: dict[str, Any],
    control: dict[str, Any],
    pr406_comparisons: list[Comparison],
    pr406: dict[str, Any],
) -> str:
    lines = [
        "<!-- Generated by `python -m upgrading` from facts/v0.3.1.yaml, facts/v0.3.1-objects.yaml,",
        "     facts/control-plane.yaml, facts/helm/ and the generated stacks, with real Helm;",
        "     tests/test_upgrading.py fails when it is stale. -->",
        f"# Upgrading from Modelplane {v031['release']}",
        "",
        f"Clusters installed by Modelplane {v031['release']} run the stack recorded in `facts/v0.3.1.yaml`. This",
        "file compares it, composed resource by composed resource, with what each generated stack renders.",
        "A key that stays keeps its composed resource; a key that is removed is deleted by Crossplane.",
        "Each Release and Object also has its own `usage-pc-<key>` Usage holding its ProviderConfig (v0.3.1's",
        "`compose-usages` keys); it comes and goes with its consumer and is not listed.",
        "",
        "## What the control plane needs",
        "",
        *_control_plane(control),
        "",
        "## Rollout order",
        "",
        ROLLOUT,
        "",
        "## Per stack",
        "",
        "Stacks whose comparison is the same share a section. Each ends with the objects Helm renders for",
        f"every Release both {v031['release']} and the stack compose:",
        "",
        OBJECTS_INTRO,
    ]
    lines += _per_stack(comparisons, v031["release"])
    if pr406_comparisons:
        lines += ["", PR406_INTRO]
        lines += _per_stack(pr406_comparisons, pr406["release"])
    return "\n".join(lines) + "\n"


PR406_INTRO = """\
## From Modelplane PR #406 (the Dynamo stack)

Clusters whose InferenceCluster set `spec.stack: Dynamo` under Modelplane PR #406 (head `a3a11bc5`) run the
stack recorded in `facts/pr406-dynamo.yaml`: Grove, the KAI Scheduler with its two Queues, and the ModelExpress
server in place of LeaderWorkerSet. Their ServingStacks carry `spec.stack: Dynamo` and get the Dynamo variant
of their cloud's stack; `spec.stack` cannot change on a live cluster (the XRD refuses it, and the function
refuses to render one stack over the other's components). PR #406's `spec.standard` and `spec.dynamo` pins are
deprecated: a stored default is accepted, any other pin is a Fatal asking for an EnvironmentConfig hold.
The rollout order is the one above. Clusters PR #406 ran on the Standard stack compare as the v0.3.1 ones."""


def _per_stack(comparisons: list[Comparison], release: str) -> list[str]:
    """One section per group of stacks whose comparison with ``release`` is the same."""
    lines: list[str] = []
    # Stacks with identical rows, in the order they come: one section each group.
    groups: dict[tuple[Row, ...], list[Comparison]] = {}
    for comparison in comparisons:
        groups.setdefault(tuple(comparison.rows), []).append(comparison)
    for group in groups.values():
        comparison = group[0]
        title = ", ".join(f"{c.stack.id} ({c.stack.cloud}, {c.stack.accelerator})" for c in group)
        lines += ["", f"### {title}", ""]
        for change in (VERSION, CHART, RENAMES, REMOVES_OBJECTS, ADDS_OBJECTS, MOVES_OBJECTS, ADDED, REMOVED):
            keys = comparison.keys(change)
            lines.append(f"- {change}: {', '.join(f'`{k}`' for k in keys) if keys else 'none'}")
        lines += ["", f"| key | {release} | this stack | change | on a live cluster |", "|---|---|---|---|---|"]
        for row in comparison.rows:
            cells = (f"`{row.key}`", row.before, row.after, ", ".join(row.changes), row.effect)
            lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
        lines += _objects_section(comparison)
    return lines


def _where(obj: Identity) -> str:
    return f"{obj.file}, hook {obj.hook}" if obj.hook else obj.file


def _objects_section(comparison: Comparison) -> list[str]:
    rows = [r for r in comparison.rows if r.objects is not None]
    if not rows:
        return []
    lines = ["", "#### Objects Helm renders, per continuing Release", ""]
    lines += [
        "| key | v0.3.1 | this stack | same | renamed | removed | added | moved |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        d = row.objects
        assert d is not None
        counts = (d.old, d.new, d.same, d.renamed, d.removed, d.added, d.moved)
        lines.append(f"| `{row.key}` | " + " | ".join(str(len(c)) for c in counts) + " |")
    for row in rows:
        assert row.objects is not None
        lines += objects_lines(row.key, row.objects)
    return lines


def objects_lines(key: str, d: Difference) -> list[str]:
    """The differences of one Release's objects, grouped by what the upgrade does with them."""
    if not d.count and not d.unpackaged:
        return []
    lines = ["", f"`{key}`:"]
    for placement in (TEMPLATE, CRDS_DIR, HOOK):
        pairs = [(o, n) for o, n in d.renamed if o.placement == placement]
        if pairs:
            lines.append(f"- {_EFFECTS[('renamed', placement)]}:")
            lines += [f"  - {o} → {n.name} ({_where(n)})" for o, n in pairs]
    for what, found in (("removed", d.removed), ("added", d.added)):
        for placement in (TEMPLATE, CRDS_DIR, HOOK):
            items = [o for o in found if o.placement == placement]
            if not items:
                continue
            effect = _EFFECTS[(what, placement)]
            if (what, placement) == ("removed", TEMPLATE) and any(o.kind == "CustomResourceDefinition" for o in items):
                effect += _CRD_DELETED
            lines.append(f"- {effect}:")
            lines += [f"  - {o} ({_where(o)})" for o in items]
    for old, new in d.moved:
        lines.append(f"- moved, {old} ({_where(old)} → {_where(new)}): {_MOVES[(old.placement, new.placement)]}")
    if d.unpackaged:
        lines.append(f"- {_UNPACKAGED}:")
        lines += [f"  - {o} ({_where(o)})" for o in d.unpackaged]
    return lines


#: Objects from files the chart's release adds and its package here lacks (facts/helm/SOURCES.yaml).
_UNPACKAGED = (
    "not compared: the published chart renders them from a file its release adds, which the packaged chart "
    "here lacks (`missingFiles` in facts/helm/SOURCES.yaml); it renders the same objects from it, so they stay"
)


def generate() -> str:
    v031 = load_yaml(FACTS / "v0.3.1.yaml")
    pr406 = load_yaml(FACTS / "pr406-dynamo.yaml")
    control = load_yaml(FACTS / "control-plane.yaml")
    # v0.3.1 had the Standard stack only; PR #406's Dynamo clusters get the Dynamo variants.
    comparisons = [compare(s, v031) for s in stacks.every() if s.kind == "Standard"]
    dynamo = [compare(s, pr406) for s in stacks.every() if s.kind == "Dynamo"]
    return render_markdown(comparisons, v031, control, dynamo, pr406)
