"""Bucket names derived from rack strings (storage.objectstore.names): valid for S3 whatever
the rack, one bucket per rack, plain racks kept as they are."""

from __future__ import annotations

import re

import pytest

from storage.objectstore import bucket_az, fast_bucket

# S3's rules for general-purpose bucket names.
S3_BUCKET_NAME = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
RACKS = ["az1", "use1-az2", "RACK0", "RACK1", "rack0", "Rack0", "us_east/1a", "us-east-1a",
         "r" * 80, "r" * 81, "x--y", "x-y", "foo-s3alias", "zone é", "a.b", "a..b", "-az1-",
         "AZ 1", "az_1"]


@pytest.mark.parametrize("rack", RACKS)
def test_every_rack_gives_a_valid_bucket_name(rack):
    name = fast_bucket(rack)
    assert S3_BUCKET_NAME.match(name) and ".." not in name, name
    assert not name.endswith(("-s3alias", "--x-s3")), name


def test_racks_never_share_a_bucket():
    assert len({fast_bucket(rack) for rack in RACKS}) == len(RACKS)


@pytest.mark.parametrize("rack", ["az1", "use1-az2", "rack0"])
def test_a_plain_rack_is_used_as_it_is(rack):
    assert fast_bucket(rack) == f"kipper-fast-{rack}"
    assert bucket_az(fast_bucket(rack)) == rack


def test_a_derived_name_stays_readable():
    assert re.fullmatch(r"kipper-fast-rack0--[0-9a-f]{8}", fast_bucket("RACK0"))
    assert re.fullmatch(r"kipper-fast-us-east-1a--[0-9a-f]{8}", fast_bucket("us_east/1a"))
