"""In a cluster Crossplane talks mTLS to the function: serve it that way for real."""

from __future__ import annotations

import asyncio
import datetime as dt
import ipaddress
import time
from pathlib import Path

import grpc
import pytest
from crossplane.function import resource
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from crossplane.function.proto.v1 import run_function_pb2_grpc as grpcv1
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from tests.support.serve import serving
from tests.support.xr import make_xr

Pem = tuple[bytes, bytes]  # certificate, key


def _issue(
    name: str, issuer: tuple[x509.Certificate, ec.EllipticCurvePrivateKey] | None
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = dt.datetime.now(dt.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer[0].subject if issuer else subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(hours=1))
        .add_extension(x509.BasicConstraints(ca=issuer is None, path_length=None), critical=True)
    )
    if issuer is not None:
        builder = builder.add_extension(
            x509.SubjectAlternativeName([x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
    cert = builder.sign(issuer[1] if issuer else key, hashes.SHA256())
    return cert, key


def _pem(cert: x509.Certificate, key: ec.EllipticCurvePrivateKey) -> Pem:
    return (
        cert.public_bytes(serialization.Encoding.PEM),
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()),
    )


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, bytes, Pem]:
    """A CA, the server's certificates laid out as Crossplane mounts them, and a client certificate."""
    ca = _issue("crossplane-root-ca", None)
    server_dir = tmp_path_factory.mktemp("tls") / "server"
    server_dir.mkdir()
    crt, key = _pem(*_issue("function-compose-serving-stack", ca))
    (server_dir / "tls.crt").write_bytes(crt)
    (server_dir / "tls.key").write_bytes(key)
    ca_pem = ca[0].public_bytes(serialization.Encoding.PEM)
    (server_dir / "ca.crt").write_bytes(ca_pem)
    return server_dir, ca_pem, _pem(*_issue("crossplane", ca))


def _wait_for(log: Path, text: str) -> str:
    deadline = time.monotonic() + 10
    while text not in log.read_text() and time.monotonic() < deadline:
        time.sleep(0.05)
    return log.read_text()


async def _call(channel: grpc.aio.Channel) -> fnv1.RunFunctionResponse:
    stub = grpcv1.FunctionRunnerServiceStub(channel)  # type: ignore[no-untyped-call]
    req = fnv1.RunFunctionRequest(
        observed=fnv1.State(composite=fnv1.Resource(resource=resource.dict_to_struct(make_xr("GKE"))))
    )
    rsp: fnv1.RunFunctionResponse = await stub.RunFunction(req, timeout=10)
    return rsp


def test_serves_mtls_from_the_directory_crossplane_mounts(pki: tuple[Path, bytes, Pem], tmp_path: Path) -> None:
    server_dir, ca_pem, (client_crt, client_key) = pki
    log = tmp_path / "log"
    with serving(["function.main"], env={"TLS_SERVER_CERTS_DIR": str(server_dir)}, log=log) as (address, _):
        assert f'"msg": "serving on {address} (TLS)"' in _wait_for(log, "serving on")
        creds = grpc.ssl_channel_credentials(ca_pem, client_key, client_crt)

        async def mutual() -> fnv1.RunFunctionResponse:
            async with grpc.aio.secure_channel(address, creds) as channel:
                return await _call(channel)

        async def plaintext() -> fnv1.RunFunctionResponse:
            async with grpc.aio.insecure_channel(address) as channel:
                return await _call(channel)

        async def without_client_certificate() -> fnv1.RunFunctionResponse:
            async with grpc.aio.secure_channel(address, grpc.ssl_channel_credentials(ca_pem)) as channel:
                return await _call(channel)

        rsp = asyncio.run(mutual())
        # Served: the first call of a reconcile asks for the EnvironmentConfigs.
        assert "servingstack-overrides" in rsp.requirements.resources
        for attempt in (plaintext, without_client_certificate):
            with pytest.raises(grpc.aio.AioRpcError):
                asyncio.run(attempt())


def test_insecure_wins_over_a_tls_directory_in_the_environment(pki: tuple[Path, bytes, Pem]) -> None:
    """Binding both would put TLS and plaintext listeners on one port, failing calls at random."""
    server_dir, _, _ = pki
    with serving(["function.main", "--insecure"], env={"TLS_SERVER_CERTS_DIR": str(server_dir)}) as (address, _):

        async def plaintext_call() -> fnv1.RunFunctionResponse:
            async with grpc.aio.insecure_channel(address) as channel:  # a new connection each time
                return await _call(channel)

        async def plaintext_calls() -> list[fnv1.RunFunctionResponse]:
            return [await plaintext_call() for _ in range(20)]

        assert all("servingstack-overrides" in r.requirements.resources for r in asyncio.run(plaintext_calls()))
