"""Every way ``lockstep run`` can be given credentials reaches the API server as the same request
headers and TLS handshake: kubeconfig tokens, basic auth, exec plugins, embedded CA and client
certificates, and the in-cluster service account. The kubeconfigs lockstep reads itself give the same
connection as kubernetes_asyncio's loader, which reads every other one."""

from __future__ import annotations

import base64
import shutil
import ssl
import subprocess
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from aiohttp import web
from kubernetes_asyncio import config as kube_config
from kubernetes_asyncio.client import Configuration

from lockstep.kube import credentials
from lockstep.kube.client import PODS, KubeClient
from lockstep.kube.credentials import CredentialsError, load_connection_info

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl to make certificates")


@dataclass
class Seen:
    """What the test API server saw of each request."""

    authorization: list[str] = field(default_factory=list)
    client_certificates: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Pki:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def _signed(name: str, subject: str, extensions: str, directory: Path) -> None:
    _openssl(
        "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
        "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", subject, cwd=directory,
    )  # fmt: skip
    (directory / f"{name}.ext").write_text(extensions)
    _openssl(
        "x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
        "-days", "1", "-out", f"{name}.crt", "-extfile", f"{name}.ext", cwd=directory,
    )  # fmt: skip


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    directory = tmp_path_factory.mktemp("pki")
    _openssl(
        "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
        "-keyout", "ca.key", "-out", "ca.crt", "-subj", "/CN=test-ca", "-days", "1", cwd=directory,
    )  # fmt: skip
    _signed("server", "/CN=apiserver", "subjectAltName=IP:127.0.0.1\n", directory)
    _signed("client", "/CN=lockstep-client", "extendedKeyUsage=clientAuth\n", directory)
    return Pki(
        ca=directory / "ca.crt",
        server_cert=directory / "server.crt",
        server_key=directory / "server.key",
        client_cert=directory / "client.crt",
        client_key=directory / "client.key",
    )


async def _serve(seen: Seen, tls: ssl.SSLContext | None) -> web.AppRunner:
    async def pod(request: web.Request) -> web.Response:
        seen.authorization.append(request.headers.get("Authorization", ""))
        peer = request.transport.get_extra_info("peercert") if request.transport else None
        if peer:
            subject = dict(pair for rdn in peer["subject"] for pair in rdn)
            seen.client_certificates.append(subject["commonName"])
        return web.json_response({"kind": "Pod", "metadata": {"name": request.match_info["name"]}})

    app = web.Application()
    app.router.add_get("/api/v1/namespaces/{namespace}/pods/{name}", pod)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0, ssl_context=tls).start()
    return runner


@pytest.fixture
async def plain_server() -> AsyncIterator[tuple[str, Seen]]:
    seen = Seen()
    runner = await _serve(seen, None)
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}", seen
    finally:
        await runner.cleanup()


@pytest.fixture
async def tls_server(pki: Pki) -> AsyncIterator[tuple[str, Seen]]:
    """HTTPS with a certificate of the test CA; a client certificate of that CA is asked for and
    checked when one is sent."""
    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(pki.ca))
    tls.load_cert_chain(pki.server_cert, pki.server_key)
    tls.verify_mode = ssl.CERT_OPTIONAL
    seen = Seen()
    runner = await _serve(seen, tls)
    try:
        yield f"https://127.0.0.1:{runner.addresses[0][1]}", seen
    finally:
        await runner.cleanup()


def _kubeconfig(path: Path, server: str, cluster: dict[str, Any], user: dict[str, Any]) -> str:
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": server, **cluster}}],
                "users": [{"name": "u", "user": user}],
                "contexts": [{"name": "ctx", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "ctx",
            }
        )
    )
    return str(path)


def _b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


async def _get_pod(kubeconfig: str | None) -> None:
    async with KubeClient(await load_connection_info(kubeconfig)) as client:
        assert (await client.get(PODS, "ns", "p"))["metadata"]["name"] == "p"


async def test_kubeconfig_tokens_basic_auth_and_exec_plugins_become_the_authorization_header(
    plain_server: tuple[str, Seen], tmp_path: Path
) -> None:
    url, seen = plain_server
    exec_credential = (
        "import json; print(json.dumps({'apiVersion': 'client.authentication.k8s.io/v1', "
        "'kind': 'ExecCredential', 'status': {'token': 'from-exec-plugin'}}))"
    )
    users: list[dict[str, Any]] = [
        {"token": "static-token"},
        {"username": "admin", "password": "secret"},
        {
            "exec": {
                "apiVersion": "client.authentication.k8s.io/v1",
                "command": sys.executable,
                "args": ["-c", exec_credential],
                "interactiveMode": "Never",
            }
        },
    ]
    for index, user in enumerate(users):
        await _get_pod(_kubeconfig(tmp_path / f"kubeconfig-{index}", url, {}, user))
    assert seen.authorization == [
        "Bearer static-token",
        "Basic " + base64.b64encode(b"admin:secret").decode(),
        "Bearer from-exec-plugin",
    ]


async def test_embedded_ca_and_client_certificate_are_used_and_an_unknown_server_is_refused(
    pki: Pki, tls_server: tuple[str, Seen], tmp_path: Path
) -> None:
    url, seen = tls_server
    client_certificate = {
        "client-certificate-data": _b64(pki.client_cert),
        "client-key-data": _b64(pki.client_key),
    }
    trusted = _kubeconfig(
        tmp_path / "trusted", url, {"certificate-authority-data": _b64(pki.ca)}, client_certificate
    )
    await _get_pod(trusted)
    assert seen.client_certificates == ["lockstep-client"] and seen.authorization == [""]
    # Without the CA the server's certificate is not trusted, unless verification is turned off.
    with pytest.raises(aiohttp.ClientConnectorCertificateError):
        await _get_pod(_kubeconfig(tmp_path / "untrusted", url, {}, {"token": "t"}))
    insecure = {"insecure-skip-tls-verify": True}
    await _get_pod(_kubeconfig(tmp_path / "insecure", url, insecure, {"token": "t"}))
    assert seen.authorization == ["", "Bearer t"]


async def test_in_a_pod_the_service_account_token_and_ca_are_used(
    pki: Pki, tls_server: tuple[str, Seen], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url, seen = tls_server
    (tmp_path / "token").write_text("service-account-token")
    (tmp_path / "ca.crt").write_bytes(pki.ca.read_bytes())
    # Where the kubelet mounts them in a pod; the loader reads this module constant at each call.
    monkeypatch.setattr(credentials, "SERVICE_ACCOUNT_DIRECTORY", tmp_path)
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", url.rsplit(":", 1)[1])
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "absent"))
    await _get_pod(None)
    assert seen.authorization == ["Bearer service-account-token"]


async def _with_kubernetes_asyncio(path: str) -> credentials.ConnectionInfo:
    configuration = Configuration()
    await kube_config.load_kube_config(config_file=path, client_configuration=configuration)
    return await credentials._connection_info_from_configuration(configuration)


def _contents(info: credentials.ConnectionInfo) -> tuple[object, ...]:
    """A connection with its certificate files' contents in place of their (temporary) paths."""
    files = (info.ca_path, info.certificate_path, info.private_key_path)
    return (
        info.server, info.insecure, info.username, info.password, info.scheme, info.token,
        *(Path(name).read_bytes() if name else None for name in files),
    )  # fmt: skip


async def test_the_kubeconfigs_read_without_kubernetes_asyncio_give_its_connection(
    pki: Pki, tmp_path: Path
) -> None:
    (tmp_path / "token-file").write_text("token-from-file\n")
    shutil.copy(pki.ca, tmp_path / "ca.crt")
    https = "https://127.0.0.1:6443/"
    variants: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
        ("http://127.0.0.1:8080", {}, {"token": "static"}),
        (https, {"certificate-authority-data": _b64(pki.ca)}, {"tokenFile": "token-file"}),
        (https, {"certificate-authority": "ca.crt"}, {"username": "admin", "password": "secret"}),
        (https, {"insecure-skip-tls-verify": True}, {"token": "", "username": "a", "password": "b"}),
        (
            https,
            {"certificate-authority": str(pki.ca)},
            {"client-certificate": str(pki.client_cert), "client-key-data": _b64(pki.client_key)},
        ),
        (https, {"certificate-authority-data": _b64(pki.ca), "certificate-authority": "absent"}, {}),
    ]
    for index, (server, cluster, user) in enumerate(variants):
        path = _kubeconfig(tmp_path / f"kubeconfig-{index}", server, cluster, user)
        fast = credentials.kubeconfig_connection_info(path)
        assert _contents(fast) == _contents(await _with_kubernetes_asyncio(path)), (cluster, user)
    assert fast.server == "https://127.0.0.1:6443" and fast.ca_path is not None
    # What only kubernetes_asyncio reads is left to it.
    exec_user = {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": "true"}}
    for cluster, user in (({}, exec_user), ({"extensions": []}, {"token": "t"})):
        path = _kubeconfig(tmp_path / "other", https, cluster, user)
        with pytest.raises(credentials._NotFast):
            credentials.kubeconfig_connection_info(path)


async def test_a_kubeconfig_field_lockstep_cannot_honour_is_refused_by_name(tmp_path: Path) -> None:
    path = _kubeconfig(
        tmp_path / "kubeconfig", "https://10.0.0.1", {"tls-server-name": "api"}, {"token": "t"}
    )
    with pytest.raises(CredentialsError, match="tls-server-name"):
        await load_connection_info(path)
