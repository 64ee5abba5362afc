"""Results that travel: every public result type converts to plain JSON data one way.

Rules:
- A result type is a msgspec ``Struct`` or a dataclass marked with :func:`portable`. Marking gives
  it ``__get_pydantic_core_schema__``: pydantic (``TypeAdapter``, FastAPI ``response_model``)
  validates it from a JSON object of its fields, accepts an instance as it is, serialises it to
  that object, and describes it in JSON Schema. Nothing here imports pydantic until pydantic asks.
- The JSON object holds every field by its Python name, plus the read-only properties named as
  ``computed`` (e.g. a report's ``ok``); on validation those are ignored (they are derived).
- :func:`to_data` is that serialisation (pydantic's, in JSON mode): datetimes become ISO 8601
  strings, tuples lists. ``to_data(x)`` equals ``TypeAdapter(type(x)).dump_python(x,
  mode="json")`` by construction.
"""

from __future__ import annotations

import typing
from collections.abc import Callable
from typing import Any, TypeVar

import msgspec

_T = TypeVar("_T", bound=type)
_computed: dict[type, tuple[str, ...]] = {}


def portable(*computed: str) -> Callable[[_T], _T]:
    """Mark a result class (msgspec Struct or dataclass) as pydantic-ready; see the module rules."""

    def mark(cls: _T) -> _T:
        _computed[cls] = computed

        def schema(klass: type, source: Any, handler: Any) -> Any:
            return _core_schema(klass, source, handler)

        cls.__get_pydantic_core_schema__ = classmethod(schema)  # type: ignore[attr-defined]
        return cls

    return mark


def _computed_schemas(cls: type, handler: Any) -> list[Any]:
    from pydantic_core import core_schema as cs

    out = []
    for name in _computed.get(cls, ()):
        returns = typing.get_type_hints(getattr(cls, name).fget)["return"]
        out.append(cs.computed_field(name, handler.generate_schema(returns)))
    return out


def _dataclass_schema(cls: type, source: Any, handler: Any) -> Any:
    """pydantic's own dataclass schema (generics resolved), with the computed properties."""
    schema = handler(source)
    found = handler.resolve_ref_schema(schema)
    if found.get("type") == "dataclass" and found["schema"].get("type") == "dataclass-args":
        found["schema"]["computed_fields"] = _computed_schemas(cls, handler)
    return schema


def _core_schema(cls: type, source: Any, handler: Any) -> Any:
    if not issubclass(cls, msgspec.Struct):
        return _dataclass_schema(cls, source, handler)
    from pydantic_core import core_schema as cs

    hints = typing.get_type_hints(cls)
    fields = [(f.name, f.required) for f in msgspec.structs.fields(cls)]
    computed = _computed.get(cls, ())
    names = [name for name, _ in fields]
    td_fields = {
        name: cs.typed_dict_field(handler.generate_schema(hints[name]), required=required)
        for name, required in fields
    }
    for name in computed:
        prop = getattr(cls, name)
        returns = typing.get_type_hints(prop.fget)["return"]
        td_fields[name] = cs.typed_dict_field(handler.generate_schema(returns), required=False)
    as_dict = cs.typed_dict_schema(
        td_fields, cls_name=cls.__name__, extra_behavior="ignore", total=False
    )
    skip = set(computed)

    def build(data: dict[str, Any]) -> Any:
        return cls(**{k: v for k, v in data.items() if k not in skip})

    def serialize(value: Any, nxt: Any) -> Any:
        out = {name: getattr(value, name) for name in names}
        for name in computed:
            out[name] = getattr(value, name)
        return nxt(out)

    from_dict = cs.no_info_after_validator_function(build, as_dict)
    return cs.json_or_python_schema(
        json_schema=from_dict,
        python_schema=cs.union_schema(
            [cs.is_instance_schema(cls), from_dict], mode="left_to_right"
        ),
        serialization=cs.wrap_serializer_function_ser_schema(serialize, schema=as_dict),
        ref=f"{cls.__module__}.{cls.__qualname__}",
    )


_adapters: dict[type, Any] = {}


def _adapter(cls: type) -> Any:
    got = _adapters.get(cls)
    if got is None:
        from pydantic import TypeAdapter

        got = _adapters[cls] = TypeAdapter(cls)
    return got


def to_data(value: object) -> Any:
    """``value`` (a result, or a list, tuple or dict of results) as plain JSON data.

    Plain JSON data: dicts with str keys, lists, str, int, float, bool and None.
    """
    if isinstance(value, list | tuple) and type(value) in (list, tuple):
        return [to_data(item) for item in value]
    if type(value) is dict:
        return {str(k): to_data(v) for k, v in value.items()}
    return _adapter(type(value)).dump_python(value, mode="json")
