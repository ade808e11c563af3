"""The suite reaches no network: a name lookup of any host but this machine fails at once
(the suite's conftest), so a client whose transport a test forgot to replace fails the
test instead of waiting on a DNS or reaching a provider."""

from __future__ import annotations

import socket

import pytest


def test_a_lookup_of_a_providers_host_fails_at_once_and_this_machine_resolves() -> None:
    for host in ("api.anthropic.com", "bedrock-runtime.us-east-1.amazonaws.com", b"pypi.org"):
        with pytest.raises(socket.gaierror, match="tests reach no network"):
            socket.getaddrinfo(host, 443)
    for local in ("localhost", "127.0.0.1", "::1", socket.gethostname()):
        assert socket.getaddrinfo(local, 80)
