"""The one number validator (mabp_gym.core.validate.check_number)."""

from __future__ import annotations

import numpy as np
import pytest

from mabp_gym.core.validate import check_number


@pytest.mark.parametrize(
    ("value", "bounds", "message"),
    [
        (True, {}, "must be a number, got True"),
        ("1", {}, "must be a number"),
        (1 + 2j, {}, "must be a number"),
        (float("nan"), {}, "must be finite"),
        (float("inf"), {"integer": True}, "must be finite"),
        (1.5, {"integer": True}, "must be an integer, got 1.5"),
        (-1, {"low": 0}, "must be >= 0, got -1"),
        (0.0, {"low": 0, "low_open": True}, "must be > 0"),
        (3, {"high": 2}, "must be <= 2, got 3"),
    ],
)
def test_check_number__names_the_field_and_what_is_allowed(value, bounds, message):
    with pytest.raises(ValueError, match=f"^field: {message}"):
        check_number(value, "field", **bounds)


def test_check_number__returns_python_numbers():
    assert check_number(np.int64(3), "k", integer=True) == 3
    assert type(check_number(np.int64(3), "k", integer=True)) is int
    assert type(check_number(np.float32(0.5), "x", low=0.0)) is float
