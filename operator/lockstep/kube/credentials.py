"""One login for lockstep's own HTTP session and for Kopf.

The result is a :class:`lockstep.kube.client.ConnectionInfo` that
:class:`lockstep.kube.client.KubeClient` uses and that Kopf's login handler hands on, for the same
server, token, CA and client cert.

kubernetes_asyncio's loader covers every variant (exec plugins, auth providers, merged kubeconfig
lists), but importing it costs 0.24-0.29 s of CPU, the largest single item of start-up
(bench/README.md). The common cases are read here directly, as kubernetes_asyncio reads them: the
in-cluster service account, and one kubeconfig file whose user has a token, a token file, a client
certificate or a user name and password. Anything else (an ``exec`` plugin, an ``auth-provider``, a
field not listed in ``FAST_CLUSTER_FIELDS`` / ``FAST_USER_FIELDS``, a ``$KUBECONFIG`` list, a file the
fast path cannot read) goes to kubernetes_asyncio, imported only then.
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import inspect
import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from lockstep.kube.client import ConnectionInfo

if TYPE_CHECKING:
    from kubernetes_asyncio.client import Configuration

SERVICE_HOST_ENV = "KUBERNETES_SERVICE_HOST"
SERVICE_PORT_ENV = "KUBERNETES_SERVICE_PORT"
SERVICE_ACCOUNT_DIRECTORY = Path("/var/run/secrets/kubernetes.io/serviceaccount")

# What the fast path reads; a cluster or user with any other field goes to kubernetes_asyncio.
FAST_CLUSTER_FIELDS = frozenset(
    {"server", "certificate-authority", "certificate-authority-data", "insecure-skip-tls-verify"}
)
FAST_USER_FIELDS = frozenset(
    {
        "token",
        "tokenFile",
        "client-certificate",
        "client-certificate-data",
        "client-key",
        "client-key-data",
        "username",
        "password",
    }
)
# Fields kubernetes_asyncio reads but a ConnectionInfo cannot carry: refused by name, not ignored.
UNSUPPORTED_CLUSTER_FIELDS = ("tls-server-name", "proxy-url")


class CredentialsError(RuntimeError):
    """No usable credentials: the message says where lockstep looked."""


class _NotFast(Exception):
    """This kubeconfig needs kubernetes_asyncio's loader."""


async def load_connection_info(kubeconfig: str | None = None) -> ConnectionInfo:
    """Credentials from ``kubeconfig`` if given, else the in-cluster service account, else
    ``$KUBECONFIG`` / ``~/.kube/config``."""
    if kubeconfig:
        if not os.path.exists(kubeconfig):  # noqa: ASYNC240 - once, at start-up
            raise CredentialsError(f"--kubeconfig {kubeconfig!r}: file does not exist")
        return await _from_kubeconfig(kubeconfig)
    in_cluster = in_cluster_connection_info()
    if in_cluster is not None:
        return in_cluster
    location = os.environ.get("KUBECONFIG", str(Path.home() / ".kube" / "config"))
    try:
        return await _from_kubeconfig(location)
    except FileNotFoundError as exc:
        raise CredentialsError(
            "no credentials: not running in a cluster (no service account) and no kubeconfig "
            f"(--kubeconfig, $KUBECONFIG or ~/.kube/config): {exc}"
        ) from exc


def in_cluster_connection_info(directory: Path | None = None) -> ConnectionInfo | None:
    """The service account the kubelet mounts in a pod, as kubernetes_asyncio's in-cluster loader
    reads it; None where it finds none (not in a pod)."""
    directory = directory or SERVICE_ACCOUNT_DIRECTORY
    host, port = os.environ.get(SERVICE_HOST_ENV), os.environ.get(SERVICE_PORT_ENV)
    token_path, ca_path = directory / "token", directory / "ca.crt"
    if not host or not port or not token_path.is_file() or not ca_path.is_file():
        return None
    token = token_path.read_text()
    if not token or not ca_path.read_text():
        return None
    hostport = f"[{host}]:{port}" if ":" in host or "%" in host else f"{host}:{port}"
    return ConnectionInfo(server=f"https://{hostport}", ca_path=str(ca_path), scheme="Bearer", token=token)


async def _from_kubeconfig(location: str) -> ConnectionInfo:
    try:
        return kubeconfig_connection_info(location)
    except _NotFast:
        return await _load_with_kubernetes_asyncio(location)


def kubeconfig_connection_info(path: str) -> ConnectionInfo:
    """The current context of kubeconfig ``path`` read as kubernetes_asyncio reads it; raises
    ``_NotFast`` for what only kubernetes_asyncio reads (and for every malformed file, so that the
    error is the one it gives)."""
    if os.pathsep in path:
        raise _NotFast
    path = os.path.expanduser(path)
    if not os.path.exists(path):
        raise FileNotFoundError(path)
    try:
        with open(path, encoding="utf-8") as file:
            config = yaml.load(file, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
        context = (_named(config["contexts"], config["current-context"]) or {})["context"]
        cluster = (_named(config["clusters"], context["cluster"]) or {})["cluster"]
        user_entry = _named(config.get("users") or [], context["user"]) if context.get("user") else None
        user = user_entry["user"] if user_entry is not None else None
    except (yaml.YAMLError, KeyError, TypeError, AttributeError, UnicodeDecodeError) as exc:
        raise _NotFast from exc
    if (
        not isinstance(cluster, dict)
        or not isinstance(user, dict | None)
        or not isinstance(cluster.get("server"), str)
    ):
        raise _NotFast
    if not set(cluster) <= FAST_CLUSTER_FIELDS or not set(user or ()) <= FAST_USER_FIELDS:
        raise _NotFast
    base = os.path.dirname(os.path.abspath(path))
    server = cluster["server"].rstrip("/")
    scheme = token = None
    if user is not None:
        token = _token(user, base)
        if token:
            scheme = "Bearer"
        elif "username" in user and "password" in user:
            scheme = "Basic"
            token = base64.b64encode(f"{user['username']}:{user['password']}".encode()).decode()
    tls = server.startswith("https")
    return ConnectionInfo(
        server=server,
        insecure=bool(cluster.get("insecure-skip-tls-verify", False)),
        scheme=scheme,
        token=token,
        ca_path=_file_or_data(cluster, "certificate-authority", base) if tls else None,
        certificate_path=_file_or_data(user, "client-certificate", base) if tls and user else None,
        private_key_path=_file_or_data(user, "client-key", base) if tls and user else None,
    )


def _named(entries: list[dict[str, Any]], name: object) -> dict[str, Any] | None:
    """The first entry called ``name``: kubernetes_asyncio merges a kubeconfig's lists by name, the
    first one kept."""
    return next((entry for entry in entries if entry["name"] == name), None)


def _token(user: dict[str, Any], base: str) -> str | None:
    """``token``, else the content of ``tokenFile`` (relative to the kubeconfig), read as is."""
    if "token" in user:
        return str(user["token"]) if user["token"] else None
    if "tokenFile" in user:
        try:
            with open(os.path.normpath(os.path.join(base, user["tokenFile"])), encoding="utf-8") as file:
                return file.read() or None
        except OSError as exc:
            raise _NotFast from exc
    return None


def _file_or_data(section: dict[str, Any], field: str, base: str) -> str | None:
    """A certificate or key as a file: ``field-data`` (base64) written to a temporary file, else the
    path ``field`` relative to the kubeconfig's directory (which must exist)."""
    data = section.get(f"{field}-data")
    if f"{field}-data" in section and data:
        try:
            return _temporary_file(base64.standard_b64decode(data))
        except (ValueError, TypeError) as exc:
            raise _NotFast from exc
    if f"{field}-data" in section or field not in section:
        return None
    location = os.path.normpath(os.path.join(base, section[field]))
    if not os.path.isfile(location):
        raise _NotFast  # kubernetes_asyncio's "File does not exists" error
    return location


_temporary_files: dict[bytes, str] = {}


def _temporary_file(content: bytes) -> str:
    """One file per distinct content (a credential reload after a 401 writes nothing new), removed
    at exit as kubernetes_asyncio does."""
    if content not in _temporary_files:
        if not _temporary_files:
            atexit.register(_remove_temporary_files)
        descriptor, name = tempfile.mkstemp()
        with os.fdopen(descriptor, "wb") as file:
            file.write(content)
        _temporary_files[content] = name
    return _temporary_files[content]


def _remove_temporary_files() -> None:
    for name in _temporary_files.values():
        with contextlib.suppress(OSError):
            os.remove(name)
    _temporary_files.clear()


async def _load_with_kubernetes_asyncio(location: str) -> ConnectionInfo:
    from kubernetes_asyncio import config as kube_config
    from kubernetes_asyncio.client import Configuration

    configuration = Configuration()
    try:
        await kube_config.load_kube_config(config_file=location, client_configuration=configuration)
    except (kube_config.ConfigException, FileNotFoundError) as exc:
        if os.path.exists(os.path.expanduser(location)):  # noqa: ASYNC240 - once, at start-up
            raise CredentialsError(f"kubeconfig {location!r}: {exc}") from exc
        raise FileNotFoundError(location) from exc
    return await _connection_info_from_configuration(configuration)


async def _connection_info_from_configuration(configuration: Configuration) -> ConnectionInfo:
    for field in UNSUPPORTED_CLUSTER_FIELDS:
        if getattr(configuration, field.replace("-", "_"), None):
            raise CredentialsError(f"the kubeconfig's cluster sets {field}, which lockstep does not support")
    header: object = configuration.get_api_key_with_prefix("BearerToken")
    if inspect.isawaitable(header):
        header = await header
    if not header:
        header = configuration.get_api_key_with_prefix("authorization")
        if inspect.isawaitable(header):
            header = await header
    scheme: str | None = None
    token: str | None = None
    if header:
        parts = str(header).split(" ", 1)
        if len(parts) == 2:
            scheme, token = parts
        else:
            token = parts[0]
    if not configuration.host:
        raise CredentialsError("the kubeconfig names no server for the current context")
    return ConnectionInfo(
        server=configuration.host,
        ca_path=configuration.ssl_ca_cert or None,
        insecure=not configuration.verify_ssl,
        username=configuration.username or None,
        password=configuration.password or None,
        scheme=scheme,
        token=token,
        certificate_path=configuration.cert_file or None,
        private_key_path=configuration.key_file or None,
    )
