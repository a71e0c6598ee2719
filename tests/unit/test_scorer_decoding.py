"""The decoder the scorer runs on every record (``fairlane_events.codec.decode``, now
pydantic-core's JSON parser first) accepts exactly the documents, and gives exactly the
records, that orjson then pydantic's ``model_validate`` give: where the two JSON parsers
could differ (what JSON forbids, escapes, duplicate keys, number forms)."""

import orjson
import pytest
from pydantic import ValidationError

from fairlane_events.codec import DecodeError, decode, encode
from fairlane_events.records import NodeSample
from tests.factories import node_sample

BASE = encode(node_sample())
MODEL = orjson.loads(BASE)["gpus"][0]["model"].encode()
TEMP = b'"temp_c":40.0'
INDEX = b'"index":0'


def _reference(data: bytes) -> NodeSample | None:
    """The decoder before: orjson's parser, then pydantic on the Python objects (by
    the wire names: the field name ``schema_`` is not one)."""
    try:
        return NodeSample.model_validate(orjson.loads(data), by_alias=True, by_name=False)
    except (orjson.JSONDecodeError, ValidationError):
        return None


CASES = {
    "as encoded": BASE,
    "lone surrogate": BASE.replace(MODEL, b"X\\ud800Y"),
    "surrogate pair": BASE.replace(MODEL, b"X\\ud83d\\ude00Y"),
    "escapes": BASE.replace(MODEL, b'X\\"\\\\\\/\\b\\f\\n\\r\\t\\u00e9Y'),
    "raw control character": BASE.replace(MODEL, b"X\x01Y"),
    "raw newline": BASE.replace(MODEL, b"X\nY"),
    "invalid UTF-8": BASE.replace(MODEL, b"X\xff\xfeY"),
    "overlong UTF-8": BASE.replace(MODEL, b"X\xc0\xafY"),
    "UTF-8 of a surrogate": BASE.replace(MODEL, b"X\xed\xa0\x80Y"),
    "non-ASCII UTF-8": BASE.replace(MODEL, "X é 😀".encode()),
    "duplicate key, first": BASE.replace(b'{"schema"', b'{"node":"zzz","schema"', 1),
    "duplicate key, last": BASE[:-1] + b',"node":"zzz"}',
    "byte order mark": b"\xef\xbb\xbf" + BASE,
    "surrounding whitespace": b" \n\t" + BASE + b" \r\n",
    "trailing content": BASE + b"x",
    "trailing NUL": BASE + b"\x00",
    "NaN": BASE.replace(TEMP, b'"temp_c":NaN'),
    "Infinity": BASE.replace(TEMP, b'"temp_c":-Infinity'),
    "overflowing float": BASE.replace(TEMP, b'"temp_c":1e400'),
    "underflowing float": BASE.replace(TEMP, b'"temp_c":1e-400'),
    "negative zero": BASE.replace(TEMP, b'"temp_c":-0'),
    "exponent": BASE.replace(TEMP, b'"temp_c":4.0E1'),
    "long mantissa": BASE.replace(TEMP, b'"temp_c":40.000000000000000000000000001'),
    "integral float for an integer": BASE.replace(INDEX, b'"index":0.0', 1),
    "exponent for an integer": BASE.replace(INDEX, b'"index":0E2', 1),
    "huge integer": BASE.replace(INDEX, b'"index":100000000000000000000000', 1),
    "leading zero": BASE.replace(INDEX, b'"index":00', 1),
    "plus sign": BASE.replace(INDEX, b'"index":+0', 1),
    "trailing comma": BASE[:-1] + b",}",
    "single quotes": BASE.replace(b'"node"', b"'node'", 1),
    "the field name for the alias": BASE.replace(b'"schema"', b'"schema_"', 1),
    "empty": b"",
    "not an object": b"[1]",
}


@pytest.mark.parametrize("data", CASES.values(), ids=CASES.keys())
def test_decode_accepts_and_gives_what_the_reference_does(data: bytes) -> None:
    expected = _reference(data)
    if expected is None:
        with pytest.raises(DecodeError):
            decode(NodeSample, data)
    else:
        assert decode(NodeSample, data) == expected


def test_a_rejected_record_is_told_in_the_same_words_as_before() -> None:
    with pytest.raises(DecodeError, match=r"^not JSON: "):
        decode(NodeSample, CASES["NaN"])  # pydantic-core alone would blame temp_c
    with pytest.raises(DecodeError, match=r"^gpus\.0\.index: Input should be less than 1024"):
        decode(NodeSample, CASES["huge integer"])
