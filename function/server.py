"""Serving gRPC the way Crossplane runs a function, saying where and how.

This is the SDK's ``runtime.serve`` (v1 and v1beta1 services, reflection,
SIGTERM stops with the SDK's grace period) with what a platform team needs
from its logs and its operators: one ``serving on ADDRESS (TLS|insecure)``
line once the port is bound (the bound port, when ``:0`` was asked for),
exactly one listener (the SDK binds a TLS and a plaintext one on the same
address when given both), and ``SO_REUSEPORT`` only when asked for.

Requests are decoded by :func:`function.inputs.decode_request`, so a request
the protobuf decoder refuses (nesting past its recursion limit) is answered
with a Fatal naming the object and field, not a bare gRPC error; responses go
out as :meth:`function.fn.FunctionRunner.respond` serialized them
(deterministically, once per distinct request). v1beta1 is served by the same
handler: its messages are wire-compatible with v1, which is how the SDK's own
beta adapter converts them.
"""

from __future__ import annotations

import asyncio
import gc
import signal
from dataclasses import dataclass

import grpc
from crossplane.function import logging, runtime
from grpc_reflection.v1alpha import reflection

from function.fn import FunctionRunner
from function.inputs import decode_request

_MB = 1024 * 1024
# The collector's youngest-generation threshold (CPython's default: 700
# container allocations). A plan computed for new documents allocates some
# ten thousand maps and lists, nearly all freed by reference counting; at
# 700 the collector runs a dozen times for one such plan, promotes what is in
# flight and so brings on passes over the whole heap, every cache included.
# Medians stay alike; the tail does not: without these settings a changed
# document's p99 over gRPC was 1.5x, changed mirrors' 2x (`./dev bench
# --floor-only`, two servers run each way; docs/design.md, What each memo buys).
GC_YOUNG_THRESHOLD = 10_000
SERVICES = ("apiextensions.fn.proto.v1.FunctionRunnerService", "apiextensions.fn.proto.v1beta1.FunctionRunnerService")


@dataclass(frozen=True)
class Listen:
    """Where and how to listen."""

    address: str
    creds: grpc.ServerCredentials | None  # None: insecure
    max_recv_mb: int
    max_send_mb: int
    # Off by default: a second server on a busy port must fail, not silently
    # share the port and split Crossplane's calls between two possibly
    # different versions of the function. On for deliberate scale-out on one
    # host (several processes behind one address).
    reuse_port: bool = False

    def options(self) -> list[tuple[str, int]]:
        # The SDK's cli.run builds the same two size options from the same flags.
        return [
            ("grpc.max_receive_message_length", self.max_recv_mb * _MB),
            ("grpc.max_send_message_length", self.max_send_mb * _MB),
            ("grpc.so_reuseport", 1 if self.reuse_port else 0),
        ]


def _already_serialized(data: bytes) -> bytes:
    return data


def add_runner(runner: FunctionRunner, server: grpc.aio.Server) -> None:
    """RunFunction on both service versions, with our decoder and the runner's serialized responses."""
    handlers = {
        "RunFunction": grpc.unary_unary_rpc_method_handler(
            runner.serve_bytes, request_deserializer=decode_request, response_serializer=_already_serialized
        )
    }
    for service in SERVICES:
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(service, handlers),))
    reflection.enable_server_reflection(runtime.SERVICE_NAMES, server)


def settle_heap() -> None:
    """Set the collector for serving, once what serving needs is loaded.

    What was loaded lives as long as the process and holds no garbage:
    frozen, the collector never walks it again. Then young objects are
    collected at :data:`GC_YOUNG_THRESHOLD`, not CPython's 700.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(GC_YOUNG_THRESHOLD, *gc.get_threshold()[1:])


def serve(runner: FunctionRunner, listen: Listen) -> None:
    """Serve until SIGTERM (or SIGINT). Raises when the address cannot be bound."""
    log = logging.get_logger()
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    server = grpc.aio.server(options=listen.options())
    add_runner(runner, server)
    if listen.creds is not None:
        port = server.add_secure_port(listen.address, listen.creds)
    else:
        port = server.add_insecure_port(listen.address)

    stopping: list[asyncio.Task[None]] = []  # keeps the task alive until it is done

    def stop() -> None:
        stopping.append(loop.create_task(server.stop(grace=runtime.SHUTDOWN_GRACE_PERIOD_SECONDS)))

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop)

    async def run() -> None:
        await server.start()
        mode = "TLS" if listen.creds is not None else "insecure"
        log.info(
            f"serving on {listen.address.rsplit(':', 1)[0]}:{port} ({mode})",
            max_recv_message_size_mb=listen.max_recv_mb,
            max_send_message_size_mb=listen.max_send_mb,
            reuse_port=listen.reuse_port,
        )
        await server.wait_for_termination()

    try:
        loop.run_until_complete(run())
    finally:
        loop.run_until_complete(server.stop(grace=runtime.SHUTDOWN_GRACE_PERIOD_SECONDS))
        loop.close()
