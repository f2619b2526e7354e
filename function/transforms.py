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

The objects a transform is given are the ones the response is encoded from,
and parts of them last beyond the call (what every cluster's bodies share,
put back as they were once the response is encoded): a transform must not
keep them past its call.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from function.compose import Desired
from function.encode import Encoding, editable, settle
from function.errors import InputError
from function.model import ServingStack

Transform = Callable[[ServingStack, dict[str, dict[str, Any]]], None]
"""``transform(xr, resources)``: edit ``resources`` in place."""


def _name(transform: Transform) -> str:
    return getattr(transform, "__qualname__", None) or type(transform).__name__


def names(transforms: Sequence[Transform]) -> str:
    """The transforms, named as messages name them."""
    return ", ".join(_name(t) for t in transforms)


def apply_transforms(
    transforms: Sequence[Transform], xr: ServingStack, desired: Desired, enc: Encoding
) -> dict[str, Any]:
    """The bodies of ``desired`` as ``transforms`` edit them, in order: the bodies themselves when there are
    none, else as :func:`function.encode.editable` hands them over through ``enc`` (the caller puts back what
    they edited of the lasting parts: :func:`function.encode.restore`, once the response is encoded)."""
    if not transforms:
        return {key: composed.body for key, composed in desired.items()}
    resources = {key: editable(composed.body, enc) for key, composed in desired.items()}
    for transform in transforms:
        try:
            transform(xr, resources)
        except InputError as err:
            raise InputError(f"transform {_name(transform)}: {err}") from None
        except Exception as err:  # noqa: BLE001 - a fork's bug, whatever it raises, is its Fatal, not a crash
            raise InputError(f"transform {_name(transform)} failed: {type(err).__name__}: {err}") from None
        if resources.keys() != desired.keys():
            added, removed = sorted(resources.keys() - desired.keys()), sorted(desired.keys() - resources.keys())
            raise InputError(
                f"transform {_name(transform)}: transforms may change resources, not add or remove them "
                f"(added {added}, removed {removed})"
            )
    settle(enc)
    return resources
