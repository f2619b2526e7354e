"""The function as a library, for teams that build their own function on it.

Three steps, each usable alone::

    stack = load_stack("GKE", "NVIDIA")                    # the generated stack
    documents = override_documents(environment_configs)    # validated override documents
    rendered = render(xr, environment_configs=..., observed=..., transforms=[...])

``render`` runs exactly what Crossplane runs (the served runner, through the
``crossplane render`` loop, in process). A fork serves its own rules with
``cli(obj=FunctionRunner(transforms=[...]))``: the same command, flags and
``render``/``explain`` subcommands, with the transforms applied to every
response. See ``example/fork/``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from function import offline
from function import stack as stacks
from function.errors import InputError
from function.fn import FunctionRunner
from function.main import cli
from function.model import Accelerator, Cloud, ServingStack, StackKind
from function.offline import RenderError, RenderResult
from function.overrides.collect import INPUT_API_VERSION, parse_environment_config
from function.overrides.document import Document
from function.render_output import render_documents
from function.stack import Stack
from function.transforms import Transform
from function.tree import struct_to_dict

__all__ = [
    "Document",
    "FunctionRunner",
    "InputError",
    "RenderError",
    "Rendered",
    "ServingStack",
    "Stack",
    "Transform",
    "cli",
    "load_stack",
    "override_documents",
    "render",
]


def load_stack(cloud: str, accelerator: str = "NVIDIA", kind: str = "Standard") -> Stack:
    """The generated stack for a cloud, accelerator and stack kind; InputError naming the stacks that exist."""
    try:
        chosen = stacks.load(Cloud(cloud), Accelerator(accelerator), StackKind(kind))
    except ValueError:
        chosen = None
    if chosen is None:
        what = "" if kind == StackKind.STANDARD else f"{kind} "
        raise InputError(f"no {what}stack for {cloud}/{accelerator}; stacks exist for {stacks.existing()}")
    return chosen


def override_documents(environment_configs: Iterable[Mapping[str, Any]]) -> list[Document]:
    """The override documents (``data.servingStack``) of EnvironmentConfigs, validated as the function does.

    EnvironmentConfigs without a document are skipped; a bad document is an
    InputError naming the EnvironmentConfig and the field.
    """
    found = (parse_environment_config(ec) for ec in environment_configs)
    return [d for d in found if d is not None]


@dataclass(frozen=True)
class Rendered:
    """What one render produced."""

    result: RenderResult

    @property
    def resources(self) -> dict[str, dict[str, Any]]:
        """Desired composed resources by composed resource name."""
        return {name: struct_to_dict(r.resource) for name, r in self.result.desired.resources.items()}

    @property
    def status(self) -> dict[str, Any]:
        """The XR status the function wrote (``status.stack``, ``status.gateway``)."""
        xr = struct_to_dict(self.result.desired.composite.resource)
        status: dict[str, Any] = xr.get("status") or {}
        return status

    @property
    def results(self) -> list[tuple[str, str]]:
        """(severity, message) of each Normal or Warning result."""
        return [(fnv1.Severity.Name(r.severity), r.message) for r in self.result.results]

    def documents(self) -> list[dict[str, Any]]:
        """The documents ``crossplane render`` prints (dump with ``render_output.dump_yaml``)."""
        return render_documents(self.result, include_results=True)


def render(
    xr: Mapping[str, Any],
    *,
    environment_configs: Sequence[Mapping[str, Any]] = (),
    observed: Iterable[Mapping[str, Any]] = (),
    input: Mapping[str, Any] | None = None,
    composition: Mapping[str, Any] | None = None,
    context: Mapping[str, Any] | None = None,
    transforms: Sequence[Transform] = (),
) -> Rendered:
    """Render one ServingStack as Crossplane would; RenderError carries a Fatal's message.

    ``observed`` are observed composed resources (with their
    ``crossplane.io/composition-resource-name`` annotation); remote resources
    are rendered once both ProviderConfigs are among them.
    """
    result = offline.render(
        FunctionRunner(transforms=transforms),
        xr,
        input_api_version=INPUT_API_VERSION,
        composition=composition,
        input=input,
        observed=observed,
        required=environment_configs,
        context=context,
    )
    return Rendered(result)
