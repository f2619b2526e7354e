"""ACME's serving-stack function: the upstream stack plus ACME's house rules.

Built on compose-serving-stack as a library (``function.library``): nothing
of the runner or the CLI is copied, so upstream releases merge cleanly.
"""

from __future__ import annotations

from typing import Any

from function.library import FunctionRunner, ServingStack, cli

OWNER_LABEL = "acme.example/owner"  # ACME's cost reports group Releases by it
# LeaderWorkerSet's chart (lws v0.8.0) puts .Values.podSecurityContext on its
# controller's pod (templates/manager/deployment.yaml).
HARDENED = "leader-worker-set"
POD_SECURITY = {"runAsNonRoot": True, "runAsUser": 65532, "seccompProfile": {"type": "RuntimeDefault"}}


def label_releases(xr: ServingStack, resources: dict[str, dict[str, Any]]) -> None:
    """Every Helm Release carries the namespace of the team that owns the cluster."""
    for body in resources.values():
        if body.get("kind") == "Release":
            body["metadata"].setdefault("labels", {})[OWNER_LABEL] = xr.metadata.namespace


def harden_leader_worker_set(_xr: ServingStack, resources: dict[str, dict[str, Any]]) -> None:
    """LeaderWorkerSet's controller runs as a fixed non-root user with the runtime's seccomp profile."""
    release = resources.get(HARDENED)
    if release is None:
        return  # not rendered (yet): nothing to harden
    values = release["spec"]["forProvider"].setdefault("values", {})
    values["podSecurityContext"] = {**values.get("podSecurityContext", {}), **POD_SECURITY}


TRANSFORMS = (label_releases, harden_leader_worker_set)


def main() -> None:
    cli(obj=FunctionRunner(transforms=TRANSFORMS))


if __name__ == "__main__":
    main()
