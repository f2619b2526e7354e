"""The served function: the real server driven over gRPC as crossplane render does, and the CLI around it."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
import pytest
from crossplane.function import resource
from crossplane.function.proto.v1beta1 import run_function_pb2 as fnv1beta1
from crossplane.function.proto.v1beta1 import run_function_pb2_grpc as grpcv1beta1

from function import stack
from function.offline import RenderError, RenderResult, run_pipeline
from function.render_output import render_documents
from tests.support import k8s_schema
from tests.support.crossplane import desired, grpc_runner, render
from tests.support.repo import REPO
from tests.support.serve import Invoke, cli, free_port
from tests.support.xr import make_xr, provider_configs


def render_over_grpc(target: str, xr: dict[str, Any], **kwargs: Any) -> RenderResult:
    return asyncio.run(
        run_pipeline(grpc_runner(target), xr=xr, observed=kwargs.pop("observed", provider_configs(xr)), **kwargs)
    )


@pytest.mark.parametrize(("cloud", "accelerator", "kind"), stack.available())
def test_every_rendered_resource_validates_against_real_crds(
    server: str, cloud: str, accelerator: str, kind: str
) -> None:
    # As the API server receives them: with the name, namespace, labels and
    # owner reference Crossplane adds (render_documents adds them as render does).
    result = render_over_grpc(server, make_xr(cloud, accelerator, stack=kind))
    got = {
        d["metadata"]["annotations"]["crossplane.io/composition-resource-name"]: d for d in render_documents(result)[1:]
    }
    covered = {f"{r['apiVersion']}/{r['kind']}" for r in got.values() if k8s_schema.covered(r)}
    # The CRDs in facts/crds: provider-helm Release and ProviderConfig, provider-kubernetes Object.
    assert {
        "helm.m.crossplane.io/v1beta1/Release",
        "helm.m.crossplane.io/v1beta1/ProviderConfig",
        "kubernetes.m.crossplane.io/v1alpha1/Object",
    } <= covered
    problems = {key: errs for key, r in got.items() if (errs := k8s_schema.validate(r))}
    assert problems == {}


@pytest.mark.parametrize(("cloud", "accelerator"), [("EKS", "NVIDIA"), ("Vultr", "AMD")])
def test_grpc_and_in_process_render_the_same_bytes(server: str, cloud: str, accelerator: str) -> None:
    xr = make_xr(cloud, accelerator)
    over_grpc = render_over_grpc(server, xr).desired.SerializeToString(deterministic=True)
    in_process = render(xr).desired.SerializeToString(deterministic=True)
    assert over_grpc == in_process


@pytest.mark.parametrize(
    ("xr", "message"),
    [
        (make_xr("Mars"), "spec.cloud"),
        (make_xr("GKE", "AMD"), "no AMD stack for cloud GKE"),
        (make_xr("GKE", secrets=[]), "a secret of type Kubeconfig is required"),
        (make_xr("GKE", gateway={"listeners": [{"name": "x", "port": "http"}]}), "spec.gateway.listeners[0].port"),
    ],
)
def test_bad_input_is_fatal_and_the_server_keeps_serving(server: str, xr: dict[str, Any], message: str) -> None:
    with pytest.raises(RenderError) as err:
        render_over_grpc(server, xr)
    assert "returned a fatal result" in str(err.value)
    assert message in str(err.value)
    assert "gateway" in desired(render_over_grpc(server, make_xr("GKE")))


def test_v1beta1_clients_are_served(server: str) -> None:
    """Crossplane falls back to v1beta1; the async runner must serve it too."""

    async def call() -> fnv1beta1.RunFunctionResponse:
        xr = make_xr("GKE")
        req = fnv1beta1.RunFunctionRequest(
            observed=fnv1beta1.State(composite=fnv1beta1.Resource(resource=resource.dict_to_struct(xr)))
        )
        async with grpc.aio.insecure_channel(server) as channel:
            stub = grpcv1beta1.FunctionRunnerServiceStub(channel)  # type: ignore[no-untyped-call]
            rsp: fnv1beta1.RunFunctionResponse = await stub.RunFunction(req, timeout=10)
            return rsp

    rsp = asyncio.run(call())
    assert [r.severity for r in rsp.results if r.severity == fnv1beta1.SEVERITY_FATAL] == []


def test_cli_without_transport_security_choice_fails_in_one_line() -> None:
    out = cli("--address", f"127.0.0.1:{free_port()}")
    assert out.returncode == 1
    assert out.stderr.strip().splitlines() == [
        "function: either --insecure or --tls-certs-dir (TLS_SERVER_CERTS_DIR) is required"
    ]


def test_cli_with_missing_tls_certificates_fails_in_one_line(tmp_path: Any) -> None:
    out = cli("--tls-certs-dir", str(tmp_path), "--address", f"127.0.0.1:{free_port()}")
    assert out.returncode == 1
    [line] = out.stderr.strip().splitlines()
    assert line.startswith(f"function: cannot read TLS certificates from {tmp_path}")


def test_cli_on_a_busy_address_fails_in_one_line(server: str) -> None:
    out = cli("--insecure", "--address", server)
    assert out.returncode == 1
    assert out.stderr.strip().splitlines()[-1].startswith(f"function: cannot serve on {server}")


def test_cli_render_prints_what_crossplane_render_prints(invoke: Invoke) -> None:
    out = invoke("render", "example/xr.yaml", "--observed", "example/observed/")
    assert out.exit_code == 0, out.stderr
    docs = out.stdout.split("\n---\n")
    assert docs[0].startswith("---\napiVersion: infrastructure.modelplane.ai/v1alpha1\nkind: ServingStack")
    assert "crossplane.io/composition-resource-name: ai-gateway\n" in docs[1]
    assert invoke("render", "example/xr.yaml", "--observed", "example/observed/").stdout == out.stdout


def test_cli_render_of_a_bad_xr_fails_in_one_line(tmp_path: Any, invoke: Invoke) -> None:
    bad = tmp_path / "xr.yaml"
    bad.write_text((REPO / "example" / "xr.yaml").read_text().replace("cloud: GKE", "cloud: Moon"))
    out = invoke("render", str(bad))
    assert out.exit_code == 1
    [line] = out.stderr.strip().splitlines()
    assert "spec.cloud" in line and "Moon" in line
