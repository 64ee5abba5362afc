"""A small FastAPI app returns every public result type with ``response_model`` set."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.testclient import TestClient
from result_samples import results

from sessionledger import to_data


def make_app(cases: list[tuple[type, Any]]) -> FastAPI:
    app = FastAPI()
    for index, (cls, value) in enumerate(cases):

        def one(value: Any = value) -> Any:
            return value

        def many(value: Any = value) -> Any:
            return [value, value]

        app.add_api_route(f"/one/{index}", one, response_model=cls, methods=["GET"])
        app.add_api_route(f"/many/{index}", many, response_model=list[cls], methods=["GET"])  # type: ignore[valid-type]
    return app


def test_every_result_type_leaves_a_fastapi_app() -> None:
    cases = results()
    client = TestClient(make_app(cases))
    for index, (cls, value) in enumerate(cases):
        got = client.get(f"/one/{index}")
        assert got.status_code == 200, (cls, got.text)
        assert got.json() == to_data(value), cls
        both = client.get(f"/many/{index}")
        assert both.status_code == 200, (cls, both.text)
        assert both.json() == [to_data(value)] * 2
    schema = client.get("/openapi.json").json()
    assert {cls.__name__ for cls, _ in cases} <= set(schema["components"]["schemas"])
