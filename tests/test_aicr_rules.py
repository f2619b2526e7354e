"""The AICR recipe resolver's merge rules and errors, and the Go template details it relies on
(RESOLUTION.md §9-§11), on small synthetic data dirs (``tmp_path``): the error paths and merge
rules the shipped data does not exercise. They always run.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from generator import gotemplate
from generator.aicr import RecipeData, load, resolve
from generator.aicr_recipes import Query
from generator.aicr_yaml import AicrError

REGISTRY = """
kind: ComponentRegistry
components:
  - name: op
    helm: {defaultRepository: https://charts.example.com, defaultChart: example/op-chart, defaultVersion: "1.0.0",
           defaultNamespace: op-system}
  - name: app
    helm: {defaultRepository: https://charts.example.com, defaultChart: app, defaultNamespace: apps}
"""
BASE = """
kind: RecipeMetadata
metadata: {name: base}
spec:
  componentRefs:
    - name: op
      type: Helm
      valuesFile: components/op/values.yaml
    - name: app
      type: Helm
      version: v2.0.0
      dependencyRefs: [op]
      manifestFiles: [components/app/manifests/a.yaml]
"""


def make_data(tmp_path: Path, overlays: dict[str, str], files: dict[str, str] | None = None) -> RecipeData:
    all_files = {
        "registry.yaml": REGISTRY,
        "overlays/base.yaml": BASE,
        "components/op/values.yaml": "driver: {version: '570', rdma: {enabled: true}}\nlist: [1, 2]\n",
        "components/app/manifests/a.yaml": "kind: ConfigMap\nmetadata: {name: a}\n",
        "components/app/manifests/b.yaml": "kind: ConfigMap\nmetadata: {name: {{ .Chart.Name }}-{{ .Chart.Version }}}",
    }
    all_files |= {f"overlays/{name}.yaml": text for name, text in overlays.items()}
    all_files |= files or {}
    for rel, text in all_files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(textwrap.dedent(text))
    return load(tmp_path)


def overlay(name: str, criteria: str, body: str, base: str = "") -> str:
    return (
        f"kind: RecipeMetadata\nmetadata: {{name: {name}}}\nspec:\n  base: '{base}'\n"
        f"  criteria: {criteria}\n" + textwrap.indent(textwrap.dedent(body), "  ")
    )


def test_registry_defaults_and_level_a_vs_level_b(tmp_path: Path) -> None:
    data = make_data(
        tmp_path,
        {
            "eks": overlay("eks", "{service: eks}", "componentRefs:\n- {name: op, overrides: {driver: {x: 1}}}"),
            "eks-training": overlay(
                "eks-training",
                "{service: eks, intent: training}",
                "componentRefs:\n- {name: op, overrides: {driver: {enabled: false}, list: []}}",
                base="eks",
            ),
        },
    )
    recipe = resolve(data, Query(service="eks", intent="training"))
    assert recipe.applied_overlays == ["base", "eks", "eks-training"]
    op = recipe.components["op"]
    # Registry fills empty fields only; chart is the last segment of defaultChart.
    assert (op.chart, op.source, op.version, op.namespace) == (
        "op-chart",
        "https://charts.example.com",
        "1.0.0",
        "op-system",
    )
    assert recipe.components["app"].version == "v2.0.0"  # verbatim, "v" kept
    # Level A replaced the earlier `driver` override whole (x: 1 is gone), level B deep-merged
    # the result over values.yaml (version and rdma stay) (§7.3).
    assert op.values == {"driver": {"version": "570", "rdma": {"enabled": True}, "enabled": False}, "list": []}
    assert recipe.deployment_order == ["op", "app"]


def test_manifest_files_are_additive(tmp_path: Path) -> None:
    m = "components/app/manifests"
    add = f"componentRefs:\n- {{name: app, manifestFiles: [{m}/b.yaml, {m}/a.yaml]}}"
    leaf = "componentRefs:\n- {name: app, source: oci://example.com/charts}"
    data = make_data(
        tmp_path,
        {
            "eks": overlay("eks", "{service: eks}", add),
            "eks-x": overlay("eks-x", "{service: eks, os: rhel}", leaf, "eks"),
        },
    )
    app = resolve(data, Query(service="eks", os="rhel")).components["app"]
    assert [x.path for x in app.manifests] == [f"{m}/a.yaml", f"{m}/b.yaml"]
    # .Chart.Name/.Chart.Version: the chart (registry defaultChart) and the version without "v" prefix.
    assert app.manifests[1].objects == [{"kind": "ConfigMap", "metadata": {"name": "app-2.0.0"}}]
    assert app.source == "oci://example.com/charts" and app.oci


def test_merge_order_is_specificity_then_name(tmp_path: Path) -> None:
    def pin(version: str) -> str:
        return f"componentRefs:\n- {{name: app, version: '{version}'}}"

    data = make_data(
        tmp_path,
        {
            "aaa": overlay("aaa", "{service: eks, os: rhel}", pin("3.0.0")),  # specificity 2
            "zzz": overlay("zzz", "{service: eks}", pin("1.0.0")),  # 1
            "yyy": overlay("yyy", "{os: rhel}", pin("2.0.0")),  # 1, tie broken by name
            "ign": overlay("ign", "{service: eks, accelerator: h100}", pin("9.9.9")),  # query says any
        },
    )
    recipe = resolve(data, Query(service="eks", os="rhel"))
    assert recipe.applied_overlays == ["base", "yyy", "zzz", "aaa"]
    assert recipe.components["app"].version == "3.0.0"


def test_enabled_false_disables(tmp_path: Path) -> None:
    data = make_data(
        tmp_path, {"x": overlay("x", "{service: eks}", "componentRefs:\n- {name: app, overrides: {enabled: false}}")}
    )
    recipe = resolve(data, Query(service="eks"))
    assert recipe.components["app"].enabled is False
    assert recipe.components["op"].enabled is True
    assert recipe.deployment_order == ["op", "app"]
    assert recipe.install_order == ["op"]


@pytest.mark.parametrize(
    ("body", "files", "message"),
    [
        ("componentRefs:\n- {name: app, dependencyRefs: [ghost]}", {}, "'app' depends on 'ghost'"),
        ("componentRefs:\n- {name: op, dependencyRefs: [app]}", {}, "dependency cycle among components: app, op"),
        ("componentRefs:\n- {name: op, valuesFile: components/op/nope.yaml}", {}, "components/op/nope.yaml not found"),
        (
            "componentRefs:\n- {name: app, manifestFiles: [components/app/manifests/m.yaml]}",
            {"components/app/manifests/m.yaml": "{{ range .Values.app }}x{{ end }}\n"},
            r"unsupported template construct \{\{range\}\} in components/app/manifests/m.yaml",
        ),
        (
            "componentRefs:\n- {name: op, valuesFile: components/op/values-x.yaml}",
            {"components/op/values-x.yaml": "feature: on\n"},
            "components/op/values-x.yaml: invalid YAML: .*ambiguous plain scalar 'on'",
        ),
    ],
    ids=["missing-dependency", "cycle", "missing-values-file", "unsupported-template", "yaml-1.1-boolean"],
)
def test_resolution_errors(tmp_path: Path, body: str, files: dict[str, str], message: str) -> None:
    data = make_data(tmp_path, {"x": overlay("x", "{service: eks}", body)}, files)
    with pytest.raises(AicrError, match=message):
        resolve(data, Query(service="eks"))


def test_unknown_recipe_in_chain(tmp_path: Path) -> None:
    data = make_data(tmp_path, {"x": overlay("x", "{service: eks}", "componentRefs: []", base="missing")})
    with pytest.raises(AicrError, match=r"overlays/x.yaml: spec.base: recipe 'missing' not found"):
        resolve(data, Query(service="eks"))


def test_string_field_must_be_quoted(tmp_path: Path) -> None:
    with pytest.raises(AicrError, match=r"overlays/x.yaml.spec.componentRefs\[0\].version: expected a string"):
        make_data(tmp_path, {"x": overlay("x", "{service: eks}", "componentRefs:\n- {name: app, version: 1.5}")})


# ----------------------------------------------------------------------------- template details


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ('{{ default "d" .Values.off }}', "false"),  # AICR's default: only nil and "" count as empty
        ('{{ default "d" .Values.none }}', "d"),
        ("{{ .Values.absent.deeper }}", "<no value>"),
        ("{{ toString .Values.absent }}", "<nil>"),
        ('a \n {{- "b" -}} \n c', "abc"),
        ("{{ with .Values.m }}{{ .k }}{{ else }}no{{ end }}", "v"),
        ('{{ if and .Values.m (ne (toString .Values.off) "false") }}y{{ else }}n{{ end }}', "n"),
        ('{{- index .Values "m" | toYaml | nindent 2 }}', "\n  k: v"),
    ],
)
def test_template_semantics(source: str, expected: str) -> None:
    root = gotemplate.GoStruct(Values={"off": False, "none": None, "m": {"k": "v"}})
    assert gotemplate.render(source, root, name="t") == expected


@pytest.mark.parametrize("source", ["{{ .Values.none.x }}", "{{ len .Values }}", "{{ $y }}", "{{ if true }}x"])
def test_template_errors(source: str) -> None:
    with pytest.raises(AicrError):
        gotemplate.render(source, gotemplate.GoStruct(Values={"none": None}), name="t")
