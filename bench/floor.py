"""The floor: a trivial servicer on the same SDK answering one canned response.

``python -m bench.floor --response FILE --address HOST:PORT`` serves the
serialized ``RunFunctionResponse`` in FILE to every RunFunction call, through
the SDK's own ``runtime.serve``: what is left of a call is the wire, the gRPC
stack and the SDK, the cost no function can go below.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import grpc
from crossplane.function import runtime
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from crossplane.function.proto.v1 import run_function_pb2_grpc as grpcv1


class CannedRunner(grpcv1.FunctionRunnerServiceServicer):
    def __init__(self, canned: fnv1.RunFunctionResponse) -> None:
        self.canned = canned

    async def RunFunction(  # noqa: N802 - the gRPC method name
        self, _req: fnv1.RunFunctionRequest, _: grpc.aio.ServicerContext | None = None
    ) -> fnv1.RunFunctionResponse:
        return self.canned


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--response", type=Path, required=True, help="serialized RunFunctionResponse")
    parser.add_argument("--address", required=True)
    args = parser.parse_args()
    canned = fnv1.RunFunctionResponse.FromString(args.response.read_bytes())
    runtime.serve(CannedRunner(canned), args.address, creds=None, insecure=True)


if __name__ == "__main__":
    main()
