"""The CEL rules (``x-kubernetes-validations``) found in the CRDs the stacks' objects are checked against, as Python.

Each rule is kept verbatim as the key, so a CRD refresh that changes a rule
leaves it unchecked and listed (``CRDIndex.unchecked_rules``) rather than
checked wrongly; ``self.matches('<re>')`` is evaluated generically.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any


def _lower_ascii(s: str) -> str:
    return "".join(c.lower() if "A" <= c <= "Z" else c for c in s)


def _of_is_local(s: Mapping[str, Any]) -> bool:
    of = s["of"]
    ref_ok = "resourceRef" not in of or "namespace" not in of["resourceRef"]
    sel_ok = "resourceSelector" not in of or "namespace" not in of["resourceSelector"]
    return ref_ok and sel_ok


CEL_RULES: dict[str, Callable[[Any], bool]] = {
    # provider-kubernetes Object spec.readiness
    "self.policy != 'DeriveFromCelQuery' || (self.policy == 'DeriveFromCelQuery' && size(self.celQuery) > 0)": (
        lambda s: s["policy"] != "DeriveFromCelQuery" or len(s["celQuery"]) > 0
    ),
    # NVIDIADriver spec
    "has(self.default) && self.default ? !has(self.nodeSelector) || size(self.nodeSelector) == 0 : true": (
        lambda s: ("nodeSelector" not in s or len(s["nodeSelector"]) == 0) if s.get("default") is True else True
    ),
    # Usage / ClusterUsage
    "has(self.by) || has(self.reason)": lambda s: "by" in s or "reason" in s,
    "has(self.resourceRef) || has(self.resourceSelector)": lambda s: "resourceRef" in s or "resourceSelector" in s,
    (
        "has(self.by) || (!has(self.of.resourceRef) || !has(self.of.resourceRef.__namespace__)) && "
        "(!has(self.of.resourceSelector) || !has(self.of.resourceSelector.__namespace__))"
    ): lambda s: "by" in s or _of_is_local(s),
    # Gateway API Inference Extension InferencePool endpointPickerRef
    "self.kind != 'Service' || has(self.port)": lambda s: s["kind"] != "Service" or "port" in s,
    # Composition
    "self.mode == 'Pipeline' && has(self.pipeline)": lambda s: s["mode"] == "Pipeline" and "pipeline" in s,
    "self.source == 'Secret' && has(self.secretRef)": lambda s: s["source"] == "Secret" and "secretRef" in s,
    "!(has(self.name) && has(self.matchLabels))": lambda s: not ("name" in s and "matchLabels" in s),
    # ImageConfig
    "size(self) > 0": lambda s: len(s) > 0,
    # CompositeResourceDefinition
    "self.scope == 'LegacyCluster' || !has(self.claimNames)": lambda s: (
        s["scope"] == "LegacyCluster" or "claimNames" not in s
    ),
    "self.scope == 'LegacyCluster' || !has(self.connectionSecretKeys)": lambda s: (
        s["scope"] == "LegacyCluster" or "connectionSecretKeys" not in s
    ),
    "!has(self.claimNames)": lambda s: "claimNames" not in s,
    "!has(self.connectionSecretKeys)": lambda s: "connectionSecretKeys" not in s,
    "self.plural == self.plural.lowerAscii()": lambda s: s["plural"] == _lower_ascii(s["plural"]),
    "!has(self.singular) || self.singular == self.singular.lowerAscii()": lambda s: (
        "singular" not in s or s["singular"] == _lower_ascii(s["singular"])
    ),
    "self.strategy == 'Webhook' && has(self.webhook)": lambda s: s["strategy"] == "Webhook" and "webhook" in s,
}
"""CEL rules (verbatim) that the validator evaluates; ``self.matches('<re>')`` is handled generically."""

# Transition rules (they read oldSelf), as (self, oldSelf) -> bool. The API
# server evaluates one only on an update where the old object has the field
# (apiextensions-apiserver pkg/apiserver/schema/cel: "transition rules").
TRANSITION_RULES: dict[str, Callable[[Any, Any], bool]] = {
    # example/xrd.yaml spec.stack: immutable once set
    "self == oldSelf": lambda new, old: bool(new == old),
}

_MATCHES_RE = re.compile(r"^self\.matches\('((?:[^'\\]|\\.)*)'\)$")


def cel_rule(expr: str) -> Callable[[Any], bool] | None:
    fn = CEL_RULES.get(expr)
    if fn is not None:
        return fn
    m = _MATCHES_RE.match(expr)
    if m:
        pattern = re.compile(m.group(1).replace("\\\\", "\\"))
        return lambda s: isinstance(s, str) and pattern.search(s) is not None
    return None


def unchecked_rules(node: Any) -> set[str]:
    """CEL rules in a schema that the validator cannot evaluate (transition rules excluded)."""
    out: set[str] = set()
    if isinstance(node, Mapping):
        for rule in node.get("x-kubernetes-validations") or []:
            expr = str(rule.get("rule", ""))
            if "oldSelf" not in expr and cel_rule(expr) is None:
                out.add(expr)
        for value in node.values():
            out |= unchecked_rules(value)
    elif isinstance(node, list):
        for value in node:
            out |= unchecked_rules(value)
    return out
