"""JSON bodies and times a client or a bad report can bring: a body nested past any real request is
a 400 naming the limit (fuzzing found a RecursionError 500), a time no clock gives renders."""

from __future__ import annotations

import falcon
import falcon.testing
import pytest

from skulk.services.api.http.request_body import MAX_DEPTH, json_body, too_deep


def body_of(raw: bytes) -> object:
    return json_body(falcon.testing.create_req(method="POST", body=raw,
                                               headers={"Content-Type": "application/json"}))


@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 5_000, 200_000])
def test_deep_arrays_and_objects_are_refused(depth):
    for raw in (b"[" * depth + b"]" * depth, b'{"a":' * depth + b"1" + b"}" * depth):
        with pytest.raises(falcon.HTTPError) as err:
            body_of(raw)
        assert err.value.status_code == 400 and str(MAX_DEPTH) in err.value.description


def test_what_real_requests_nest_is_accepted():
    assert body_of(b"[" * MAX_DEPTH + b"]" * MAX_DEPTH) is not None
    assert not too_deep({"messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]})


@pytest.mark.parametrize("ts", [1e300, -1e300, float("nan"), float("inf")])
def test_a_time_no_clock_gives_renders_instead_of_a_500(ts):
    """Regression (the 10-minute fuzz): a report on the bus with a huge timestamp made every
    diagnostics route answer 500 `OverflowError`."""
    from skulk.services.api.observe.timestamps import iso_auto, iso_micros

    assert iso_micros(ts).startswith(("9999-", "0001-")) and iso_auto(ts).startswith(("9999-", "0001-"))
