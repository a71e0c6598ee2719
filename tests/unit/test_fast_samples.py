"""``decode_node_sample``: msgspec first, the pydantic path where msgspec refuses. The
places where two JSON readers could differ (tests/unit/test_scorer_decoding.py's cases)
and the ones where msgspec's rules are not JSON Schema's."""

import pytest

from fairlane_events.codec import DecodeError, decode, encode
from fairlane_events.fast_samples import FastNodeSample, decode_fast, decode_node_sample
from fairlane_events.records import NodeSample
from tests.factories import node_sample
from tests.property.test_fast_samples import same_record
from tests.unit.test_scorer_decoding import CASES


def _record(gpu: str = "", node: str = '"n1"') -> bytes:
    head = f'{{"schema":"node-sample/1","node":{node},"ts_ms":1700000000000,"source":"sim",'
    return (head + f'"gpus":[{{"uuid":"G","index":0,"model":"H"{gpu}}}]}}').encode()


NARROWER = {  # msgspec refuses, the schema accepts
    "integral float for an integer": _record().replace(b'"index":0', b'"index":0.0'),
    "exponent for an integer": _record().replace(b'"index":0', b'"index":1E2'),
    "reasons from 2**63": _record(',"clock_event_reasons":9223372036854775808'),
    "reasons 2**64 - 1": _record(',"clock_event_reasons":18446744073709551615'),
    "invalid value a later key replaces": _record(',"temp_c":-1,"temp_c":1'),
}
REJECTED = {  # by both
    "the field name for the alias": CASES["the field name for the alias"],
    "reasons 2**64": _record(',"clock_event_reasons":18446744073709551616'),
    "ECC count 2**63": _record(',"ecc_uncorrected_volatile":9223372036854775808'),
    "node ending in a newline": _record(node='"n1\\n"'),
    "node with a non-ASCII digit": _record(node='"n\u0663"'),
    "model of 129 code points": _record().replace(
        b'"H"', ('"' + "\U0001f600" * 129 + '"').encode()
    ),
    "memory used beyond total": _record(',"mem_used_bytes":2,"mem_total_bytes":1'),
    "a GPU twice": _record().replace(b"}]", b'},{"uuid":"G","index":1,"model":"H"}]'),
    "healthy 1": _record(',"healthy":1'),
    "a float for a boolean": _record(',"remapped_rows_pending":0.0'),
    "true for a float": _record(',"temp_c":true'),
    "slowdown 1e-400 (0)": _record(',"slowdown_temp_c":1e-400'),
}
ALIKE = {  # both give the same record, or both refuse
    **{name: data for name, data in CASES.items() if name not in NARROWER | REJECTED},
    "model of 128 code points": _record().replace(
        b'"H"', ('"' + "\U0001f600" * 128 + '"').encode()
    ),
    "integer for a float": _record(',"temp_c":40'),
    "bytes per s 2**50 as an integer": _record(',"pcie_tx_bytes_per_s":1125899906842624'),
}


@pytest.mark.parametrize("data", ALIKE.values(), ids=ALIKE.keys())
def test_what_msgspec_takes_is_the_models_record(data: bytes) -> None:
    fast = decode_fast(data)
    try:
        model = decode(NodeSample, data)
    except DecodeError:
        assert fast is None
        return
    assert fast is not None
    assert same_record(fast, model)


@pytest.mark.parametrize("data", NARROWER.values(), ids=NARROWER.keys())
def test_where_msgspec_is_narrower_the_model_decides(data: bytes) -> None:
    assert decode_fast(data) is None
    assert decode_node_sample(data) == decode(NodeSample, data)


@pytest.mark.parametrize("data", REJECTED.values(), ids=REJECTED.keys())
def test_rejected_in_the_models_words(data: bytes) -> None:
    assert decode_fast(data) is None
    with pytest.raises(DecodeError) as fast:
        decode_node_sample(data)
    with pytest.raises(DecodeError) as slow:
        decode(NodeSample, data)
    assert str(fast.value) == str(slow.value)


def test_a_valid_record_comes_as_msgspecs_struct() -> None:
    assert isinstance(decode_node_sample(encode(node_sample())), FastNodeSample)


def test_a_tombstone_is_rejected() -> None:
    with pytest.raises(DecodeError, match="tombstone"):
        decode_node_sample(None)
