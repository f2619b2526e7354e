"""Transforms: a fork's own changes to the rendered resources, without copying the runner.

A transform is called with the validated XR and the desired composed
resources (composed resource name -> object, plain dicts) after the stack and
the override documents were rendered, and edits them in place. Transforms run
in the order given, before the status is written and the response is sent.

A transform may change resources but not add or remove them: removing a
desired resource deletes it from the cluster, which only an explicit
override (``state: Removed``) may do. A transform that raises, or that adds
or removes a resource, turns the response into a Fatal naming it, so
Crossplane keeps the last applied state.
"""

from __future__ import annotations

from collections.abc import Callable, MutableMapping, Sequence
from typing import Any

from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from function.errors import InputError
from function.model import ServingStack
from function.tree import struct_to_dict, to_struct

Transform = Callable[[ServingStack, dict[str, dict[str, Any]]], None]
"""``transform(xr, resources)``: edit ``resources`` in place."""


def _name(transform: Transform) -> str:
    return getattr(transform, "__qualname__", None) or type(transform).__name__


def apply_transforms(
    transforms: Sequence[Transform], xr: ServingStack, desired: MutableMapping[str, fnv1.Resource]
) -> None:
    """Run ``transforms`` over ``desired`` (a response's desired resources)."""
    if not transforms:
        return
    resources = {key: struct_to_dict(res.resource) for key, res in desired.items()}
    keys = set(resources)
    for transform in transforms:
        try:
            transform(xr, resources)
        except InputError as err:
            raise InputError(f"transform {_name(transform)}: {err}") from None
        except Exception as err:  # noqa: BLE001 - a fork's bug, whatever it raises, is its Fatal, not a crash
            raise InputError(f"transform {_name(transform)} failed: {type(err).__name__}: {err}") from None
        if set(resources) != keys:
            added, removed = sorted(set(resources) - keys), sorted(keys - set(resources))
            raise InputError(
                f"transform {_name(transform)}: transforms may change resources, not add or remove them "
                f"(added {added}, removed {removed})"
            )
    for key, body in resources.items():
        try:
            struct = to_struct(body)
        except TypeError as err:
            names = ", ".join(_name(t) for t in transforms)
            raise InputError(f"transforms {names}: resource {key}: {err}; a resource holds JSON values only") from None
        desired[key].resource.CopyFrom(struct)
