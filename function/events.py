"""Results that become Events, only when something changed since the last reconcile.

Crossplane turns every Normal and Warning result into an Event on the XR, on
every reconcile (crossplane internal/controller/apiextensions/composite/
composition_functions.go collects them, reconciler.go
handleCommonCompositionResult records each). It does not deduplicate: its
recorder is client-go's broadcaster (cmd/crossplane/core/core.go,
record.NewBroadcaster), whose correlator only folds identical Events into a
count and, per object, allows a burst of 25 and then one Event every five
minutes (k8s.io/client-go tools/record/events_cache.go: defaultSpamBurst,
defaultSpamQPS). A result repeated on every reconcile therefore costs an API
write each time and uses up that allowance, so a new, real warning can be
dropped. And Events expire (an hour by default), so a warning an operator
must still see later cannot live only there.

So: the warnings stay visible as the XR condition ``Warnings`` (True with the
warnings as its message, False when there are none), and are emitted as
Warning results only when that condition changes. The Normal results (the
summary of the applied EnvironmentConfigs, or that none applies, and the
override layer's notes) are emitted only when ``status.stack``, which records
the same documents, versions and states, changes. Both compare with the
observed XR: the function's own output of the last reconcile, as Crossplane
stored it.
"""

from __future__ import annotations

from collections.abc import Sequence

from crossplane.function import response
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from function.inputs import condition

WARNINGS_CONDITION = "Warnings"
# Bound the condition message (it is stored on the XR); the Events carry
# every warning in full when they change.
MESSAGE_MAX = 8192


def warnings_message(warnings: Sequence[str]) -> str:
    message = "\n".join(warnings)
    if len(message) <= MESSAGE_MAX:
        return message
    return message[: MESSAGE_MAX - 40].rstrip() + f"\n… ({len(warnings)} warnings in all)"


def report(
    req: fnv1.RunFunctionRequest,
    rsp: fnv1.RunFunctionResponse,
    warnings: Sequence[str],
    normals: Sequence[str],
    *,
    stack_changed: bool,
) -> None:
    """Set the ``Warnings`` condition; add Warning and Normal results only where they changed.

    ``stack_changed``: whether the ``status.stack`` this response writes differs from the observed one.
    """
    message = warnings_message(warnings)
    status = fnv1.STATUS_CONDITION_TRUE if warnings else fnv1.STATUS_CONDITION_FALSE
    reason = "Warnings" if warnings else "NoWarnings"
    rsp.conditions.add(type=WARNINGS_CONDITION, status=status, reason=reason, message=message)
    observed = req.observed.composite.resource
    # Read safely: the observed XR's conditions may be anything (function.inputs.condition).
    last_status, last_message = condition(observed, WARNINGS_CONDITION)
    unchanged = last_status == ("True" if warnings else "False") and last_message == message
    if not unchanged:
        for warning in warnings:
            response.warning(rsp, warning)
    if stack_changed:
        for normal in normals:
            response.normal(rsp, normal)
