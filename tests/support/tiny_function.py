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
itself on insecure gRPC through the SDK runtime.
"""

from __future__ import annotations

import argparse
from typing import Any

from crossplane.function import logging, request, resource, response, runtime
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from crossplane.function.proto.v1 import run_function_pb2_grpc as grpcv1


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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--address", required=True)
    args = parser.parse_args()
    logging.configure(level=logging.Level.DISABLED)
    runtime.serve(TinyFunction(), args.address, creds=None, insecure=True)


if __name__ == "__main__":
    main()
