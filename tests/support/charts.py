"""The pinned charts of stacks/charts.yaml and their recorded inventories (facts/charts)."""

from __future__ import annotations

from functools import cache
from typing import Any

import yaml

from generator.build import REPO
from generator.stackfile import Charts, read

FACTS = REPO / "facts" / "charts"
CHARTS = read(REPO / "stacks" / "charts.yaml", Charts).charts


@cache
def inventory(chart: str) -> dict[str, Any]:
    facts = CHARTS[chart]
    data: dict[str, Any] = yaml.safe_load((FACTS / f"{chart}-{facts.version}.yaml").read_text())
    return data
