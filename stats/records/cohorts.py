"""Which cohort an experiment belongs to, read from its run directory's manifest.

stats/README.md, "Cohorts". The paper reports open-weight models (weights the user holds and
runs) apart from provider-served ones (a model behind someone else's API). That is a property of
who serves the model, so it is read from the manifest, never from the continuation level (a
provider may serve token-level completions, and a user's own server may be driven at text level):

- no `backend` object (the in-process engine): open-weight;
- a remote backend (`backend` and `endpoint` objects, backends/http_backend.py) whose endpoint
  is the user's own machine or network (localhost, a loopback, private or link-local address, a
  name without a dot or ending in .local/.internal/.lan): open-weight, a server the user runs on
  the weights its manifest names (its tokenizer's sha256);
- any other remote endpoint: provider-served.

A provider reached through a private gateway reads as open-weight, and a self-hosted server on a
public name as provider-served: there is no override flag yet (`--label` keeps such a run as its
own row).
"""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

from nudgeability.splice.rundir.manifest import Manifest

OPEN_WEIGHT = "open-weight"
PROVIDER = "provider-served"
COHORTS = (OPEN_WEIGHT, PROVIDER)
_LOCAL_SUFFIXES = (".local", ".internal", ".lan", ".localhost", ".home.arpa")


def is_own_host(host: str) -> bool:
    """Whether `host` names the user's own machine or network (module docstring)."""
    host = host.strip("[]").lower()
    if not host or host == "localhost" or "." not in host and ":" not in host:
        return True
    if host.endswith(_LOCAL_SUFFIXES):
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    return address.is_loopback or address.is_private or address.is_link_local


def cohort_of(manifest: Manifest) -> str:
    """OPEN_WEIGHT or PROVIDER for a run directory's manifest (module docstring)."""
    backend = manifest.backend
    if backend is None:
        return OPEN_WEIGHT
    endpoint = manifest.endpoint or {}
    url = endpoint.get("base_url") or backend.get("base_url") or ""
    host = urlsplit(url if "//" in url else f"//{url}").hostname or ""
    return OPEN_WEIGHT if is_own_host(host) else PROVIDER
