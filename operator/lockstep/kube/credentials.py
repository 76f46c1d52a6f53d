"""One login for lockstep's own HTTP session and for Kopf.

kubernetes_asyncio reads the credentials (in-cluster service account, or a kubeconfig with all its
auth variants); the result becomes a :class:`lockstep.kube.client.ConnectionInfo` that
:class:`lockstep.kube.client.KubeClient` uses and that Kopf's login handler hands on, for the same
server, token, CA and client cert.
"""

from __future__ import annotations

import inspect
import os

from kubernetes_asyncio import config as kube_config
from kubernetes_asyncio.client import Configuration

from lockstep.kube.client import ConnectionInfo


class CredentialsError(RuntimeError):
    """No usable credentials: the message says where lockstep looked."""


async def load_connection_info(kubeconfig: str | None = None) -> ConnectionInfo:
    """Credentials from ``kubeconfig`` if given, else the in-cluster service account, else
    ``$KUBECONFIG`` / ``~/.kube/config``."""
    configuration = Configuration()
    if kubeconfig:
        if not os.path.exists(kubeconfig):  # noqa: ASYNC240 - once, at start-up
            raise CredentialsError(f"--kubeconfig {kubeconfig!r}: file does not exist")
        await kube_config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
    else:
        try:
            kube_config.load_incluster_config(client_configuration=configuration)
        except kube_config.ConfigException:
            try:
                await kube_config.load_kube_config(client_configuration=configuration)
            except (kube_config.ConfigException, FileNotFoundError) as exc:
                raise CredentialsError(
                    "no credentials: not running in a cluster (no service account) and no kubeconfig "
                    f"(--kubeconfig, $KUBECONFIG or ~/.kube/config): {exc}"
                ) from exc
    return await connection_info_from_configuration(configuration)


async def connection_info_from_configuration(configuration: Configuration) -> ConnectionInfo:
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
