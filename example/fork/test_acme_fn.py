"""ACME's function: its rules land on what upstream renders, and nothing else changes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from acme_fn import HARDENED, OWNER_LABEL, POD_SECURITY, TRANSFORMS

from function.library import RenderError, load_stack, render

EXAMPLE = Path(__file__).resolve().parents[1]
XR = yaml.safe_load((EXAMPLE / "xr.yaml").read_text())
OBSERVED = list(yaml.safe_load_all((EXAMPLE / "observed" / "provider-configs.yaml").read_text()))
COMPOSITION = yaml.safe_load((EXAMPLE / "composition.yaml").read_text())


def _render(**kwargs: Any) -> dict[str, dict[str, Any]]:
    return render(XR, observed=OBSERVED, composition=COMPOSITION, **kwargs).resources


def test_house_rules_on_top_of_upstream() -> None:
    upstream, acme = _render(), _render(transforms=TRANSFORMS)
    assert upstream.keys() == acme.keys()
    releases = [k for k, body in acme.items() if body["kind"] == "Release"]
    assert len(releases) == sum(1 for c in load_stack("GKE").components if c.is_release)
    for key in releases:
        assert acme[key]["metadata"]["labels"][OWNER_LABEL] == "team-ml"
    values = acme[HARDENED]["spec"]["forProvider"]["values"]
    assert values["podSecurityContext"] == {
        **upstream[HARDENED]["spec"]["forProvider"]["values"].get("podSecurityContext", {}),
        **POD_SECURITY,
    }
    # Everything else is upstream's, byte for byte.
    for key in acme:
        if key in releases:
            acme[key]["metadata"]["labels"].pop(OWNER_LABEL)
        if key == HARDENED:
            acme[key]["spec"]["forProvider"]["values"].pop("podSecurityContext")
            upstream[key]["spec"]["forProvider"]["values"].pop("podSecurityContext", None)
    assert acme == upstream


def test_with_the_bank_overrides_too() -> None:
    configs = list(yaml.safe_load_all((EXAMPLE / "environmentconfigs" / "regulated-bank.yaml").read_text()))
    acme = _render(transforms=TRANSFORMS, environment_configs=configs)
    assert acme[HARDENED]["spec"]["forProvider"]["values"]["podSecurityContext"]["runAsUser"] == 65532
    assert "servingstack.modelplane.ai/overridden-by" in acme[HARDENED]["metadata"]["annotations"]


def test_a_failing_rule_is_a_fatal() -> None:
    def broken(_xr: Any, _resources: dict[str, dict[str, Any]]) -> None:
        raise KeyError("spec")

    with pytest.raises(RenderError, match=r"transform .*broken failed: KeyError"):
        _render(transforms=(broken,))
