"""Render offline, in process, the way ``crossplane render`` drives the function.

``render`` runs the function through :mod:`function.render_loop` (the same
requests, requirements loop and output documents as ``crossplane render``).
Given a Composition, the function Input is the one its pipeline step carries
and the Composition is checked as render checks it (compositeTypeRef, Pipeline
mode, selector labels). Only this function's steps can run here: a step of
another Function (function-environment-configs, say) is refused with a hint to
pass what it would put in the context with ``--context-values``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from function.fn import FunctionRunner
from function.overrides.collect import INPUT_API_VERSION
from function.render_loop import RenderError, RenderResult, run_composition, run_pipeline, servicer_runner


def own_steps(composition: Mapping[str, Any]) -> dict[str, str]:
    """Function name per pipeline step; raises unless every step runs this function.

    A step is this function's when its Input is ours
    (``servingstack.fn.modelplane.ai/v1beta1``) or it names the same Function
    as such a step.
    """
    pipeline = (composition.get("spec") or {}).get("pipeline") or []
    steps = {
        str(entry.get("step", "")): str((entry.get("functionRef") or {}).get("name", ""))
        for entry in pipeline
        if isinstance(entry, Mapping)
    }
    ours = {
        str((entry.get("functionRef") or {}).get("name", ""))
        for entry in pipeline
        if isinstance(entry, Mapping) and (entry.get("input") or {}).get("apiVersion") == INPUT_API_VERSION
    }
    if not ours:
        raise RenderError(f"the Composition has no pipeline step with a {INPUT_API_VERSION} Input")
    for step, function in steps.items():
        if function not in ours:
            raise RenderError(
                f'pipeline step "{step}" runs Function "{function}", which only crossplane render can run; '
                "give what it puts in the context with --context-values or --context-files, or use crossplane render"
            )
    return steps


def render(
    runner: FunctionRunner,
    xr: Mapping[str, Any],
    *,
    composition: Mapping[str, Any] | None = None,
    input: Mapping[str, Any] | None = None,
    observed: Iterable[Mapping[str, Any]] = (),
    required: Sequence[Mapping[str, Any]] = (),
    context: Mapping[str, Any] | None = None,
) -> RenderResult:
    """Render one XR; raises :class:`RenderError` as render fails (a Fatal, a bad Composition)."""
    run = servicer_runner(runner)
    if composition is None:
        return asyncio.run(run_pipeline(run, xr=xr, input=input, observed=observed, required=required, context=context))
    if input is not None:
        raise RenderError("give the function Input either in the Composition or with --input, not both")
    runners = dict.fromkeys(own_steps(composition).values(), run)
    return asyncio.run(
        run_composition(runners, composition, xr=xr, observed=observed, required=required, context=context)
    )
