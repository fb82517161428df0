"""Instants on the wire: RFC 3339 in, `iso` out, for every year the API can be asked about."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from titen.domain.clock import iso, parse_iso


def test_iso_pads_years_below_1000_as_rfc_3339_requires():
    assert iso(datetime(1, 1, 1, tzinfo=UTC)) == "0001-01-01T00:00:00.000Z"
    assert iso(datetime(987, 6, 5, 4, 3, 2, 1999, tzinfo=UTC)) == "0987-06-05T04:03:02.001Z"


@pytest.mark.parametrize(
    "text",
    ["2026-07-30T10:52:00.000Z", "2026-07-30t12:52:00+02:00", "2026-07-30T10:52:00z"],
)
def test_rfc_3339_instants_are_read_in_utc(text):
    assert parse_iso(text) == datetime(2026, 7, 30, 10, 52, tzinfo=UTC)


@pytest.mark.parametrize(
    "text",
    [
        "2026-07-30",  # no time
        "2026-07-30T10:52:00",  # no offset
        "20260730T105200Z",  # ISO 8601's basic form, not RFC 3339
        "2026-07-30 10:52:00Z",  # a space for the T
        "2026-07-30T10:52:00+0200",
        "2026-02-30T10:52:00Z",
        "9999-12-31T23:59:59-01:00",  # past year 9999 in UTC
        "0001-01-01T00:00:00+01:00",  # before year 1 in UTC
    ],
)
def test_anything_else_is_a_value_error(text):
    with pytest.raises(ValueError):
        parse_iso(text)
