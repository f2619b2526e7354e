"""stacks/charts.yaml against the chart inventories (facts/charts/), read from the pinned chart sources.

Every value path the override layer writes (images, replicas, resources, pull
secrets, PodDisruptionBudgets) must be one the chart reads; a path it does not
read would be written into nothing. Image completeness and defaults:
tests/test_chart_images.py.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from function.paths import get_path
from function.stack import ImageRef, PdbPaths
from tests.support.charts import CHARTS, inventory

_MISSING = object()


def value(chart: str, path: str) -> Any:
    return get_path(inventory(chart)["values"], path, _MISSING)


def read_by_chart(chart: str, path: str) -> bool:
    """A value the chart's templates read: by its own path, or inside a map a template takes whole.

    Templates hand maps to helpers, `with` blocks and `toYaml`; the inventory
    then records the map, and the key must sit in it (its parent map exists).
    """
    referenced = set(inventory(chart)["templateValues"])
    if path in referenced:
        return True
    parts = path.split(".")
    # A list element (``env[name=X]``) sits in the list the template takes.
    ancestors = {re.sub(r"\[[^]]*\]$", "", ".".join(parts[:i])) for i in range(1, len(parts))}
    return bool(ancestors & referenced) and isinstance(value(chart, ".".join(parts[:-1])), dict)


def image_paths(img: ImageRef) -> dict[str, str]:
    return {k: p for k in ("ref", "registry", "repository", "tag") if (p := getattr(img, k))}


@pytest.mark.parametrize("chart", sorted(CHARTS))
def test_facts_are_read_at_the_pinned_version(chart: str) -> None:
    data = inventory(chart)
    assert (data["chart"], data["version"]) == (chart, CHARTS[chart].version)


@pytest.mark.parametrize("chart", sorted(CHARTS))
def test_image_paths_are_read_by_the_chart(chart: str) -> None:
    # Completeness and defaults: tests/test_chart_images.py.
    for img in CHARTS[chart].images:
        for path in image_paths(img).values():
            assert read_by_chart(chart, path), f"{chart} image {img.name}: {path} is not read by the chart"


@pytest.mark.parametrize("chart", sorted(CHARTS))
def test_shortcut_paths_are_read_by_the_chart(chart: str) -> None:
    facts = CHARTS[chart]
    paths = [
        *facts.replicas,
        *facts.resources,
        *facts.pullSecretRefListPaths,
        *facts.pullSecretNameListPaths,
        *facts.pullSecretNamePaths,
    ]
    assert [p for p in paths if not read_by_chart(chart, p)] == []


def _budgets(chart: str) -> list[PdbPaths]:
    facts = CHARTS[chart]
    return [b for b in [facts.podDisruptionBudget, *facts.extraPodDisruptionBudgets] if b is not None]


@pytest.mark.parametrize("chart", sorted(c for c in CHARTS if _budgets(c)))
def test_budgets_name_every_field_the_chart_reads(chart: str) -> None:
    # The shortcut writes one of minAvailable/maxUnavailable and nulls the
    # other: a chart default beside a user's value is rejected by the API server.
    referenced = set(inventory(chart)["templateValues"])
    for budget in _budgets(chart):
        given = [p for p in (budget.min_available, budget.max_unavailable) if p]
        assert given, f"{chart}: {budget}"
        if len(given) == 1:
            # One field only where the templates read no other (kai-scheduler's
            # Config takes enabled and maxUnavailable, pkg/apis/kai/v1/common/service.go).
            parent, _, field = given[0].rpartition(".")
            other = "maxUnavailable" if field == "minAvailable" else "minAvailable"
            assert f"{parent}.{other}" not in referenced, f"{chart}: {parent}.{other} is read but not declared"
        for path in (budget.enabled, budget.min_available, budget.max_unavailable):
            assert path is None or read_by_chart(chart, path), f"{chart}: {path}"
