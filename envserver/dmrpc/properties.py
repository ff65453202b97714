"""The remote's properties, as DM Lab's EnvCApi and dm_env_rpc's Properties extension
have them: keys with a type, a description, and readable/writable/listable flags.

A table of :class:`Property` rows; reads and writes go through the row's functions, so
a property says what it does in one place. Errors name the key and what is allowed:
:class:`PropertyError` carries the dm_env_rpc status code the extension expects
(NOT_FOUND for an unknown key, PERMISSION_DENIED for a read-only write,
INVALID_ARGUMENT for a value of the wrong type or out of range).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from dm_env_rpc.v1 import dm_env_rpc_pb2 as pb, tensor_utils
from dm_env_rpc.v1.extensions import properties_pb2 as props
from google.rpc import code_pb2

#: Property types and their dm_env_rpc data types.
_DTYPES: dict[type, int] = {str: pb.DataType.STRING, float: pb.DataType.DOUBLE, int: pb.DataType.INT64}


class PropertyError(Exception):
    """A property request that cannot be served; ``code`` is a ``google.rpc.Code``."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class Property:
    """One property: ``read`` gives its value now; ``write`` (None: read-only) checks
    and applies a new one, raising ``ValueError`` with what is allowed."""

    key: str
    kind: type
    description: str
    read: Callable[[], Any]
    write: Callable[[Any], Awaitable[None]] | None = None

    def spec(self) -> props.PropertySpec:
        return props.PropertySpec(
            spec=pb.TensorSpec(name=self.key, dtype=_DTYPES[self.kind]),
            is_readable=True, is_writable=self.write is not None, is_listable=False,
            description=self.description,
        )


class Properties:
    """The table, and the dm_env_rpc extension's three requests over it."""

    def __init__(self, rows: Iterable[Property]) -> None:
        self.rows: Mapping[str, Property] = {row.key: row for row in rows}

    def _row(self, key: str) -> Property:
        row = self.rows.get(key)
        if row is None:
            raise PropertyError(
                code_pb2.NOT_FOUND, f"no property {key!r}; the properties are {sorted(self.rows)}"
            )
        return row

    def read(self, key: str) -> Any:
        return self._row(key).read()

    async def write(self, key: str, value: Any) -> None:
        row = self._row(key)
        if row.write is None:
            writable = sorted(k for k, r in self.rows.items() if r.write is not None)
            raise PropertyError(
                code_pb2.PERMISSION_DENIED, f"property {key!r} is read-only; writable: {writable}"
            )
        if isinstance(value, np.ndarray) or not _fits(row.kind, value):
            raise PropertyError(
                code_pb2.INVALID_ARGUMENT,
                f"property {key!r} takes a {row.kind.__name__}, not {value!r}",
            )
        try:
            await row.write(row.kind(value))
        except ValueError as exc:
            raise PropertyError(code_pb2.INVALID_ARGUMENT, f"property {key!r}: {exc}") from None

    async def handle(self, request: props.PropertyRequest) -> props.PropertyResponse:
        """A dm_env_rpc ``PropertyRequest``'s response; :class:`PropertyError` otherwise."""
        which = request.WhichOneof("payload")
        if which == "read_property":
            key = request.read_property.key
            row = self._row(key)
            value = tensor_utils.pack_tensor(row.read(), dtype=_DTYPES[row.kind])
            return props.PropertyResponse(read_property=props.ReadPropertyResponse(value=value))
        if which == "write_property":
            tensor = request.write_property.value
            if tensor.WhichOneof("payload") is None or list(tensor.shape):
                raise PropertyError(code_pb2.INVALID_ARGUMENT, "a property value is one scalar")
            await self.write(request.write_property.key, tensor_utils.unpack_tensor(tensor))
            return props.PropertyResponse(write_property=props.WritePropertyResponse())
        if which == "list_property":
            key = request.list_property.key
            if key:  # the table is flat: only the root lists anything
                self._row(key)
                return props.PropertyResponse(list_property=props.ListPropertyResponse())
            specs = [row.spec() for row in self.rows.values()]
            return props.PropertyResponse(list_property=props.ListPropertyResponse(values=specs))
        raise PropertyError(code_pb2.INVALID_ARGUMENT, "a PropertyRequest must read, write or list")


def _fits(kind: type, value: Any) -> bool:
    """Whether a decoded scalar is of the property's type (ints pass as floats)."""
    if kind is str:
        return isinstance(value, str)
    if isinstance(value, bool | np.bool_ | str | bytes):
        return False
    if kind is int:
        return isinstance(value, int | np.integer)
    return isinstance(value, int | float | np.integer | np.floating)
