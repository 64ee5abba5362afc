"""Results that travel: every public result type through pydantic's TypeAdapter and to_data."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import TypeAdapter, ValidationError
from result_samples import results

from sessionledger import projections, replay, to_data
from sessionledger.eventlog import MemoryStore, TrashEntry


def _names(cases: list[tuple[type, Any]]) -> list[str]:
    return [cls.__name__ for cls, _ in cases]


@pytest.mark.parametrize("case", results(), ids=_names(results()))
def test_type_adapter_round_trips(case: tuple[type, Any]) -> None:
    cls, value = case
    adapter: TypeAdapter[Any] = TypeAdapter(cls)
    data = adapter.dump_python(value, mode="json")
    assert data == to_data(value)
    assert json.loads(json.dumps(data)) == data  # plain JSON data
    assert adapter.validate_python(value) is value  # an instance passes as it is
    again = adapter.validate_json(adapter.dump_json(value))
    assert type(again) is cls
    assert to_data(again) == data
    assert adapter.json_schema()["type"] == "object"


def test_computed_properties_travel_and_are_ignored_on_input() -> None:
    report = replay.verify(MemoryStore())
    data = to_data(report)
    assert data["ok"] is True and data["sessions"] == []
    assert TypeAdapter(replay.VerifyReport).validate_python(data).ok
    done = to_data(results()[10][1])
    assert done["tokens_saved"] == 80


def test_bad_input_is_a_validation_error_naming_the_field() -> None:
    with pytest.raises(ValidationError, match="updated_at"):
        TypeAdapter(projections.SessionInfo).validate_python(
            {"key": "a", "created_at": "2026-01-01T00:00:00Z", "updated_at": "yesterday"}
        )


def test_to_data_of_lists_and_dicts() -> None:
    entry = TrashEntry(
        id="1", key="k", deleted_at=results()[0][1].created_at, reason="timeout", location="x"
    )
    got = to_data({"rows": [entry], "n": (1, 2)})
    assert got["rows"][0]["key"] == "k" and got["n"] == [1, 2]
    assert isinstance(got["rows"][0]["deleted_at"], str)
