"""Every request body a provider test sends through ``MockProvider`` is checked, after the
test, against the SDK's own request type for its endpoint (see ``_request_types``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from parlour.runtime.providers.testing import MockProvider
from tests.runtime.providers._sent_bodies import SentBodies


@pytest.fixture(autouse=True)
def sent_bodies(monkeypatch: pytest.MonkeyPatch) -> Iterator[SentBodies]:
    """The bodies this test sent; each must fit its endpoint's SDK request type.

    The check runs at teardown, not in the transport: an error raised there would reach the
    client as a failed request and could be mapped into a retry instead of failing the test.
    """
    sent = SentBodies()
    serve = MockProvider.__call__

    def recording(self: MockProvider, request: object) -> object:
        response = serve(self, request)
        sent.record(request, self.bodies[-1])
        return response

    monkeypatch.setattr(MockProvider, "__call__", recording)
    yield sent
    sent.check_all()
