"""The namespaces a ServingStack's secrets may be read from: the tenancy boundary of a shared control plane.

Crossplane v2 makes the namespace the unit of tenancy: whoever may write a
ServingStack in a namespace must reach, through the ProviderConfigs the
function composes, only what that namespace holds. Both providers run with
the right to read Secrets in every namespace, and read them where the
ProviderConfig says (provider-kubernetes pkg/kube/client/client.go,
CommonCredentialExtractor), but for provider-helm's kubeconfig, which it reads
from its Release's namespace whatever the ProviderConfig says
(pkg/clients/helm/helm.go, enrichLocalSecretRefs): a stack split over two
clusters. So:

* the Kubeconfig comes from the ServingStack's own namespace, always;
* a cloud identity comes from its own namespace or from one the
  Composition's function Input allows (``spec.secrets.allowedNamespaces``);
  with no such policy, from its own only.

Anything else is a Fatal naming the entry: nothing is rendered, and
Crossplane keeps the last applied state.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from function.errors import InputError, excerpt, first_few
from function.model import KUBECONFIG, ServingStack
from function.strictmodel import StrictModel

# Kubernetes' rule for namespace names: an RFC 1123 DNS label
# (apimachinery pkg/api/validation ValidateNamespaceName). A name outside it
# can never match a namespace, so it is refused where the Composition says it.
NamespaceName = Annotated[str, Field(min_length=1, max_length=63, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")]

ALLOWED_FIELD = "spec.secrets.allowedNamespaces"


class SecretsPolicy(StrictModel):
    """``spec.secrets`` of the function Input: where, besides its own namespace, an identity may come from."""

    allowedNamespaces: tuple[NamespaceName, ...] = ()  # noqa: N815 - the Input's field name


def check_secrets(xr: ServingStack, name: str, policy: SecretsPolicy | None) -> None:
    """Refuse a secret entry outside the namespaces the ServingStack may read (module docstring); ``name``
    names the ServingStack in messages."""
    own = xr.metadata.namespace
    others = tuple(dict.fromkeys(ns for ns in (policy.allowedNamespaces if policy else ()) if ns != own))
    for i, secret in enumerate(xr.spec.secrets):
        namespace = secret.namespace
        if not namespace or namespace == own or (secret.type != KUBECONFIG and namespace in others):
            continue
        entry = f"{name}: spec.secrets[{i}] ({secret.type} {excerpt(secret.name)}): namespace {excerpt(namespace)}"
        home = f"the ServingStack's own namespace {excerpt(own)}" if own else "the ServingStack's own namespace"
        if secret.type == KUBECONFIG:
            raise InputError(
                f"{entry}: a Kubeconfig is read from {home} only, so that a ServingStack reaches no other "
                "team's cluster; remove the namespace and keep the Secret beside the ServingStack "
                "(nothing is rendered; Crossplane keeps the last applied state)"
            )
        allowed = (
            f"{home} or the namespaces the Composition's function Input allows ({ALLOWED_FIELD}: "
            f"{first_few(list(others), ', ')})"
            if others
            else f"{home} only: the Composition's function Input allows no other namespace ({ALLOWED_FIELD})"
        )
        raise InputError(
            f"{entry}: not allowed; an identity secret may come from {allowed} "
            "(nothing is rendered; Crossplane keeps the last applied state)"
        )
