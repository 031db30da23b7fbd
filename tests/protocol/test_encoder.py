"""protocol.encoder writes every request and response of every version kio knows exactly as
kio's codec does: entities filled with sample values, optional fields present and absent,
tagged fields set."""

from __future__ import annotations

import datetime
import importlib
import io
import uuid
from dataclasses import fields

import pytest
from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.serial import entity_writer
from kio.serial._introspect import (EntityField, EntityTupleField, PrimitiveField,
                                    PrimitiveTupleField, classify_field, get_field_tag,
                                    get_schema_field_type, is_optional)

from protocol.encoder import encoder

SAMPLES = {
    "int8": -3, "int16": -300, "int32": 70_000, "int64": -(1 << 40), "uint8": 200,
    "uint16": 60_000, "uint32": 4_000_000_000, "uint64": 1 << 63, "float64": 2.5,
    "bool": True, "string": "naïve", "bytes": b"\x00\x01", "records": b"records" * 30,
    "uuid": uuid.UUID(int=0x1234), "error_code": ErrorCode.unknown_topic_or_partition,
    "timedelta_i32": datetime.timedelta(milliseconds=1500),
    "timedelta_i64": datetime.timedelta(milliseconds=86_400_123),
    "datetime_i64": datetime.datetime(2026, 11, 26, 12, 0, 0, 123_000, datetime.timezone.utc),
}


def sample(entity_type: type, nulls: bool) -> object:
    """An entity with every field set: optional ones None when ``nulls``."""
    values = {}
    for field in fields(entity_type):
        kind = classify_field(field)
        if nulls and is_optional(field) and get_field_tag(field) is None:
            values[field.name] = None
        elif isinstance(kind, PrimitiveField):
            values[field.name] = SAMPLES[get_schema_field_type(field)]
        elif isinstance(kind, PrimitiveTupleField):
            values[field.name] = (SAMPLES[get_schema_field_type(field)],) * 2
        elif isinstance(kind, EntityField):
            values[field.name] = sample(kind.type_, nulls)
        else:
            assert isinstance(kind, EntityTupleField)
            values[field.name] = (sample(kind.type_, nulls), sample(kind.type_, not nulls))
    return entity_type(**values)


def schemas() -> list[tuple[str, type]]:
    found = []
    for api_key in range(100):
        for version in range(20):
            for load in (load_request_schema, load_response_schema):
                try:
                    schema = load(api_key, version)
                except Exception:  # noqa: BLE001 - no such API or version in kio
                    continue
                found.append((f"{schema.__module__}", schema))
    return found


@pytest.mark.parametrize("nulls", [False, True], ids=["present", "null"])
def test_every_schema_is_written_as_kio_writes_it(nulls):
    checked = 0
    for name, schema in schemas():
        entity = sample(schema, nulls)
        try:
            expected = io.BytesIO()
            entity_writer(schema)(expected, entity)
        except (TypeError, NotImplementedError, ValueError, AttributeError) as refusal:
            with pytest.raises(type(refusal)):
                encoder(schema)(bytearray(), entity)
            continue
        out = bytearray()
        encoder(schema)(out, entity)
        assert bytes(out) == expected.getvalue(), name
        checked += 1
    assert checked > 500


@pytest.mark.parametrize("version", [0, 12], ids=["legacy", "flexible"])
@pytest.mark.parametrize("length", [0, 1, 63, 64, 126, 127, 128, 300])
def test_number_arrays_of_any_length_are_written_as_kio_writes_them(version, length):
    """Short number arrays are packed with their length by a Struct made per length, long
    ones item by item: both as kio writes them, on either side of the bound and of a
    flexible length's one-byte varint."""
    partition_type = importlib.import_module(
        f"kio.schema.metadata.v{version}.response").MetadataResponsePartition
    values = {f.name: getattr(sample(partition_type, False), f.name)
              for f in fields(partition_type)}
    entity = partition_type(**{**values, "replica_nodes": tuple(range(length)),
                               "isr_nodes": tuple(range(length // 2))})
    expected = io.BytesIO()
    entity_writer(partition_type)(expected, entity)
    out = bytearray()
    encoder(partition_type)(out, entity)
    assert bytes(out) == expected.getvalue()
