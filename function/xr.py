"""The ServingStack a request carries: named for messages, validated, and its v0.3.1 fields resolved."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from function import legacy
from function.errors import InputError, describe, excerpt
from function.model import KUBECONFIG, ServingStack


def xr_name(raw: dict[str, Any]) -> str:
    """``ServingStack <namespace>/<name>`` for messages, whatever the metadata holds."""
    meta = raw.get("metadata")
    meta = meta if isinstance(meta, dict) else {}
    # Whatever types they have: the name is for messages only, and the model
    # reports a mistyped name or namespace itself.
    name, namespace = meta.get("name", "?"), meta.get("namespace", "")
    return _named(
        name if isinstance(name, str) else repr(name), namespace if isinstance(namespace, str) else repr(namespace)
    )


def name_of(xr: ServingStack) -> str:
    """``ServingStack <namespace>/<name>`` of a validated XR, for messages."""
    return _named(xr.metadata.name, xr.metadata.namespace)


def _named(name: str, namespace: str) -> str:
    name, namespace = excerpt(name), excerpt(namespace)
    return f"ServingStack {namespace + '/' if namespace else ''}{name}"


def parse_xr(raw: dict[str, Any]) -> ServingStack:
    """The validated XR, with ``spec.cloud`` set (given, or inferred from v0.3.1's fields); InputError otherwise."""
    try:
        xr = ServingStack.model_validate(raw)
    except ValidationError as err:
        raise InputError(describe(err, xr_name(raw))) from None
    if xr.spec.kubeconfig() is None:
        raise InputError(f"{xr_name(raw)}: spec.secrets: a secret of type {KUBECONFIG} is required")
    return legacy.resolve(xr, xr_name(raw))
