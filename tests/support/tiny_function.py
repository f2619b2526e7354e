"""A tiny composition function used to test the offline render loop (function/offline.py).

Its behaviour is picked by ``input.mode``:

* ``require`` (default): requires the ConfigMap ``settings`` by name (namespace
  from ``input.namespace`` if given) and ``gpu`` Nodes by label. Until both were
  resolved it returns only the requirements; then it composes ``config``
  (ready) and ``pool`` (not ready), writes the XR status and a context key.
* ``all``: requires every ConfigMap (a selector with no name and no labels).
* ``unstable``: asks for a different ConfigMap on every call (never stabilises).
* ``fatal``: returns a fatal result.
* ``extend``: (a second pipeline step) adds a resource next to the desired
  state it received, recording what the previous step left in the context.

Run as ``python -m tests.support.tiny_function --address 127.0.0.1:PORT`` it serves
itself on insecure gRPC through the SDK runtime. Below it, the scenario the loop
tests render with it (:data:`XR`, :data:`REQUIRED`) and the bytes render prints
for it (:data:`EXPECTED_YAML`).
"""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

from crossplane.function import logging, request, resource, response, runtime
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from crossplane.function.proto.v1 import run_function_pb2_grpc as grpcv1

from function.offline import RenderResult, RunFn, run_pipeline, servicer_runner
from function.tree import struct_to_dict


def _input(req: fnv1.RunFunctionRequest) -> dict[str, Any]:
    return resource.struct_to_dict(req.input) if req.HasField("input") else {}


class TinyFunction(grpcv1.FunctionRunnerServiceServicer):
    """See the module docstring."""

    async def RunFunction(self, req: fnv1.RunFunctionRequest, _ctx: Any) -> fnv1.RunFunctionResponse:  # noqa: N802
        rsp = response.to(req)
        spec = _input(req)
        mode = spec.get("mode", "require")

        if mode == "fatal":
            response.fatal(rsp, "the cluster is on fire")
            return rsp

        if mode == "unstable":
            n = int(req.context["calls"]) if "calls" in req.context else 0
            rsp.context["calls"] = n + 1
            response.require_resources(rsp, "settings", "v1", "ConfigMap", match_name=f"settings-{n}")
            return rsp

        if mode == "all":
            response.require_resources(rsp, "every", "v1", "ConfigMap")
            if "every" not in req.required_resources:
                return rsp
            names = [r["metadata"]["name"] for r in request.get_required_resources(req, "every")]
            resource.update_status(rsp.desired.composite, {"configMaps": names})
            return rsp

        if mode == "extend":
            seen = resource.struct_to_dict(req.context["example.org/tiny"]) if "example.org/tiny" in req.context else {}
            resource.update(
                rsp.desired.resources["extra"],
                {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "data": {
                        "previous": ",".join(sorted(req.desired.resources)),
                        "seen": str(int(seen.get("replicas", -1))),
                    },
                },
            )
            rsp.desired.resources["extra"].ready = fnv1.READY_TRUE
            response.warning(rsp, "extended")
            return rsp

        # mode == "require"
        namespace = spec.get("namespace")
        response.require_resources(
            rsp, "settings", "v1", "ConfigMap", match_name=spec.get("settingsName", "settings"), namespace=namespace
        )
        response.require_resources(rsp, "gpus", "v1", "Node", match_labels={"accelerator": "gpu"})
        if "settings" not in req.required_resources or "gpus" not in req.required_resources:
            return rsp

        settings = request.get_required_resource(req, "settings") or {}
        gpus = sorted(n["metadata"]["name"] for n in request.get_required_resources(req, "gpus"))
        replicas = int(settings.get("data", {}).get("replicas", "1"))
        xr = resource.struct_to_dict(req.observed.composite.resource)

        resource.update(
            rsp.desired.resources["config"],
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"labels": {"app": "tiny"}},
                "data": {"owner": xr["metadata"]["name"], "gpus": ",".join(gpus)},
            },
        )
        rsp.desired.resources["config"].ready = fnv1.READY_TRUE
        resource.update(
            rsp.desired.resources["pool"],
            {"apiVersion": "example.org/v1", "kind": "Pool", "spec": {"replicas": replicas, "ratio": 0.5}},
        )
        resource.update_status(rsp.desired.composite, {"replicas": replicas, "gpuNodes": len(gpus)})
        rsp.context["example.org/tiny"] = {"replicas": replicas}
        response.normal(rsp, f"found {len(gpus)} GPU nodes")
        rsp.conditions.append(
            fnv1.Condition(type="StackRendered", status=fnv1.STATUS_CONDITION_TRUE, reason="Rendered", message="ok")
        )
        return rsp


XR: dict[str, Any] = {
    "apiVersion": "example.org/v1alpha1",
    "kind": "XStack",
    "metadata": {"name": "demo", "namespace": "team-a", "uid": "0000-1111"},
    "spec": {"cloud": "EKS"},
}


def config_map(
    name: str, namespace: str = "team-a", labels: dict[str, str] | None = None, **data: str
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if labels:
        meta["labels"] = labels
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": dict(data)}


def node_object(name: str, **labels: str) -> dict[str, Any]:
    """A Node with ``labels``."""
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}}


REQUIRED: list[dict[str, Any]] = [
    config_map("settings", replicas="3"),
    config_map("settings", namespace="other", replicas="9"),
    config_map("unrelated"),
    node_object("gpu-b", accelerator="gpu", zone="a"),
    node_object("cpu-a", accelerator="none"),
    node_object("gpu-a", accelerator="gpu"),
    {"apiVersion": "v2", "kind": "Node", "metadata": {"name": "gpu-z", "labels": {"accelerator": "gpu"}}},
]


def tiny() -> RunFn:
    """The tiny function, called in process."""
    return servicer_runner(TinyFunction())


def render(mode: str = "require", **kw: Any) -> RenderResult:
    """The tiny function rendered over :data:`XR` in ``mode``, the :data:`REQUIRED` objects supplied."""
    kw.setdefault("required", REQUIRED)
    extra_input = kw.pop("extra_input", {})
    return asyncio.run(run_pipeline(tiny(), xr=XR, step="tiny", input={"mode": mode, **extra_input}, **kw))


def names(resources: fnv1.Resources) -> list[tuple[str, str]]:
    """(namespace, name) of each fetched object, in order."""
    out = []
    for item in resources.items:
        d = struct_to_dict(item.resource)
        out.append((d["metadata"].get("namespace", ""), d["metadata"]["name"]))
    return out


EXPECTED_YAML = """\
---
apiVersion: example.org/v1alpha1
kind: XStack
metadata:
  name: demo
  namespace: team-a
status:
  conditions:
  - lastTransitionTime: "2024-01-01T00:00:00Z"
    message: 'Unready resources: pool'
    reason: Creating
    status: "False"
    type: Ready
  - lastTransitionTime: "2024-01-01T00:00:00Z"
    message: ok
    reason: Rendered
    status: "True"
    type: StackRendered
  gpuNodes: 2
  replicas: 3
---
apiVersion: v1
data:
  gpus: gpu-a,gpu-b
  owner: demo
kind: ConfigMap
metadata:
  annotations:
    crossplane.io/composition-resource-name: config
  generateName: demo-
  labels:
    app: tiny
    crossplane.io/composite: demo
  namespace: team-a
  ownerReferences:
  - apiVersion: example.org/v1alpha1
    blockOwnerDeletion: true
    controller: true
    kind: XStack
    name: demo
    uid: 0000-1111
---
apiVersion: example.org/v1
kind: Pool
metadata:
  annotations:
    crossplane.io/composition-resource-name: pool
  generateName: demo-
  labels:
    crossplane.io/composite: demo
  namespace: team-a
  ownerReferences:
  - apiVersion: example.org/v1alpha1
    blockOwnerDeletion: true
    controller: true
    kind: XStack
    name: demo
    uid: 0000-1111
spec:
  ratio: 0.5
  replicas: 3
---
apiVersion: render.crossplane.io/v1beta1
kind: Result
message: found 2 GPU nodes
severity: SEVERITY_NORMAL
step: tiny
---
apiVersion: render.crossplane.io/v1beta1
fields:
  example.org/tiny:
    replicas: 3
kind: Context
"""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--address", required=True)
    args = parser.parse_args()
    logging.configure(level=logging.Level.DISABLED)
    runtime.serve(TinyFunction(), args.address, creds=None, insecure=True)


if __name__ == "__main__":
    main()
