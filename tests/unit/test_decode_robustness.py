"""Decoding never raises anything but `WireError`, whatever the bytes: a receiving loop catches
only that, so any other exception is a crashed role (the supervisor's crash is the node's)."""

from __future__ import annotations

import random

import msgpack
import pytest

from skulk.wire import codec
from skulk.wire.errors import FieldTypeError, WireError
from tools.fuzz_frames import FrameMaker


def test_an_unhashable_value_for_a_literal_field_is_a_wire_error():
    """Regression (fuzzing the supervisor's notify socket): a map where a Literal field is
    expected raised TypeError inside the decoder, which killed the supervisor, so the node."""
    for bad in ({"x": 1}, [1, 2], ["operator"]):
        frame = msgpack.packb({"t": "event.instance_deleted", "v": 1,
                               "b": {"instance_id": "i", "cause": bad}}, use_bin_type=True)
        with pytest.raises(FieldTypeError):
            codec.decode(frame)


@pytest.mark.parametrize("seed", range(4))
def test_fuzzed_frames_decode_or_raise_a_wire_error(seed):
    maker = FrameMaker(random.Random(seed))
    for _ in range(1500):
        for frame in maker.shot().frames:
            try:
                codec.decode(frame)
            except WireError:
                pass



def test_an_int_field_near_2_to_the_64_is_a_bad_frame_not_a_later_crash():
    """Found by the frame fuzzer on a clean-clone run: a Campaign with clock 2**64 - 1 was
    accepted; the master's next campaign (clock + 1) could not be encoded and it crashed."""
    import msgpack

    from skulk.wire import codec
    from skulk.wire.cluster import Campaign
    from skulk.wire.errors import WireError

    def frame(clock: int) -> bytes:
        return msgpack.packb({"t": Campaign.TYPE, "v": Campaign.VERSION,
                              "b": {"node_id": "n", "clock": clock, "last_idx": 1}}, use_bin_type=True)

    with pytest.raises(WireError):
        codec.decode(frame(2 ** 64 - 1))
    with pytest.raises(WireError):
        codec.decode(frame(-(2 ** 63)))
    assert codec.decode(frame(7)) == Campaign(node_id="n", clock=7, last_idx=1)
