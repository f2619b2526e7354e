"""example/expected/ is what `function render` prints for each example today."""

from __future__ import annotations

import pytest

from tests.support import examples
from tests.support.repo import REPO


@pytest.mark.parametrize("name", sorted(examples.cases()))
def test_expected_output_is_current(name: str) -> None:
    path = examples.EXPECTED / f"{name}.yaml"
    assert path.exists(), f"{path.name} missing: run ./dev examples"
    assert examples.render(examples.cases()[name]) == path.read_text(), f"{path.name} is stale: run ./dev examples"


def test_no_file_without_a_case() -> None:
    names = {p.stem for p in examples.EXPECTED.glob("*.yaml")} - {"cases"}
    assert names == set(examples.cases())


def test_each_environment_config_shows_in_some_case() -> None:
    """Every example EnvironmentConfig is applied in at least one expected output."""
    configs = {p.stem for p in (REPO / "example" / "environmentconfigs").glob("*.yaml")}
    texts = "".join(p.read_text() for p in examples.EXPECTED.glob("*+*.yaml"))
    for name in configs:
        assert f"- {name}\n" in texts, name
