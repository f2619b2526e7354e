"""A plan's built values are never changed once built: the pull-secret lists a rebuild writes are one object per
(secret names, item shape), shared by every component, plan and cached build that writes them, which only holds
while nothing writes into a built component after its build."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest

from function import overrides, stack
from function.model import Accelerator, Cloud
from function.overrides import Collected, Plan
from function.overrides.document import Document, OverrideDocument
from function.overrides.explain import as_data, explain, format_text
from function.overrides.images import pull_secret_list
from function.overrides.pulls import as_skopeo, pulls
from function.paths import get_path
from function.stack import Component
from function.tree import copy_tree
from tests.support.overrides import bank, ec, overridden
from tests.support.xr import make_xr

SECRETS = ["bank-pull", "team-pull"]


def _document(name: str, doc: dict[str, Any]) -> Document:
    digest = hashlib.blake2b(json.dumps(doc, sort_keys=True).encode(), digest_size=16).digest()
    return Document(name, f"EnvironmentConfig {name}: data.servingStack", OverrideDocument.model_validate(doc), digest)


def _body(component: Component) -> dict[str, Any]:
    return component.values if component.is_release else component.manifest


def _team(chosen: stack.Stack) -> dict[str, Any]:
    """Values on pull-secret paths that hold a list already: one naming a secret of its own, one naming the
    bank's (kept as it is), on the first components taking each shape."""
    components: dict[str, Any] = {}
    with_refs = next(c for c in chosen.components if c.is_release and c.pull_secret_ref_list_paths)
    components[with_refs.key] = {"values": _at(with_refs.pull_secret_ref_list_paths[0], [{"name": "own"}])}
    names = [c for c in chosen.components if c.is_release and c.pull_secret_name_list_paths]
    if names:
        paths = names[0].pull_secret_name_list_paths
        values = _at(paths[0], ["own"]) | _at(paths[-1], SECRETS) if len(paths) > 1 else _at(paths[0], ["own"])
        components.setdefault(names[0].key, {"values": {}})["values"].update(values)
    return {"priority": 20, "components": components}


def _at(path: str, value: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    node = out
    *parts, last = path.split(".")
    for part in parts:
        node = node.setdefault(part, {})
    node[last] = value
    return out


def _drivers(chosen: stack.Stack) -> dict[str, Any]:
    if not chosen.driver.resource:
        return {}
    return {"drivers": [{"name": "h100", "nodeSelector": {"pool": "h100"}, "version": "1.2.3"}]}


@pytest.mark.parametrize(
    ("cloud", "accelerator"),
    [(Cloud.EKS, Accelerator.NVIDIA), (Cloud.EXISTING, Accelerator.NVIDIA), (Cloud.EXISTING, Accelerator.AMD)],
)
def test_nothing_changes_built_values_once_built(
    monkeypatch: pytest.MonkeyPatch, cloud: Cloud, accelerator: Accelerator
) -> None:
    chosen = stack.load(cloud, accelerator)
    assert chosen is not None
    planned: list[tuple[Plan, Collected, list[dict[str, Any]]]] = []
    real = overrides.plan

    def capturing(on: stack.Stack, found: Collected) -> Plan:
        got = real(on, found)
        planned.append((got, found, [copy_tree(_body(p.component)) for p in got.planned]))  # as built
        return got

    monkeypatch.setattr(overrides, "plan", capturing)
    xr = make_xr(cloud.value, accelerator.value)
    documents = [ec("bank", bank(imagePullSecrets=SECRETS) | _drivers(chosen)), ec("team", _team(chosen))]
    overridden(xr, *documents)
    plan, found, _built = planned[-1]
    shared = [pull_secret_list(tuple(SECRETS), plain) for plain in (False, True)]
    shared_before = copy_tree(shared)
    # The plan written into: the lists are there, each the very object, at paths of several components.
    at = [
        get_path(_body(p.component), path)
        for p in plan.planned
        for path in (*p.component.pull_secret_ref_list_paths, *p.component.pull_secret_name_list_paths)
    ]
    assert sum(any(value is s for s in shared) for value in at) >= 5
    # Whatever reads a plan: a render of it again (and of other plans over the same builds), its status and
    # summary, explain, the pull list.
    overridden(xr, *documents)
    overridden(xr, documents[0])
    overridden(xr, documents[0], ec("team", _team(chosen) | {"priority": 30}))
    explained, notes = explain(chosen, found)
    format_text(chosen, found, explained, notes)
    as_data(chosen, found, explained, notes)
    as_skopeo(pulls(chosen, found))
    assert shared == shared_before
    for got, _found, built in planned:
        assert [_body(p.component) for p in got.planned] == built


@pytest.mark.parametrize(("cloud", "accelerator"), [(Cloud.EKS, Accelerator.NVIDIA), (Cloud.EXISTING, Accelerator.AMD)])
def test_every_pull_secret_path_written_is_credited_to_its_document(cloud: Cloud, accelerator: Accelerator) -> None:
    chosen = stack.load(cloud, accelerator)
    assert chosen is not None
    documents = (_document("secrets", {"registry": {"imagePullSecrets": SECRETS}}),)
    got = overrides.plan(chosen, Collected(documents=documents))
    for p in got.planned:
        c = p.component
        paths = list(  # (each once: a path may be declared twice)
            dict.fromkeys(
                (
                    *c.pull_secret_ref_list_paths,
                    *c.pull_secret_name_list_paths,
                    *c.pull_secret_name_paths,
                    *c.pull_secret_ref_paths,
                )
            )
        )
        credited = got.provenance.get(c.key, {})
        prefix = "values" if c.is_release else "manifest"
        assert [
            path.removeprefix(f"{prefix}.") for path in credited if path.removeprefix(f"{prefix}.") in paths
        ] == paths
        assert all(credited[f"{prefix}.{path}"] == "secrets" for path in paths), c.key
        assert ("secrets" in p.changed_by) == bool(paths or credited), c.key
