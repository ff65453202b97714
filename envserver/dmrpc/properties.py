"""The Properties extension of dm_env_rpc over the remote's property table
(:mod:`envserver.properties`): requests and responses as its protobufs, refusals as the
status codes its client turns into ``KeyError``, ``PermissionError`` and ``ValueError``.
"""

from __future__ import annotations

from typing import Final

from dm_env_rpc.v1 import dm_env_rpc_pb2 as pb, tensor_utils
from dm_env_rpc.v1.extensions import properties_pb2 as props
from google.rpc import code_pb2

from ..properties import Properties, Property, PropertyError, Refusal

#: Property types and their dm_env_rpc data types.
DTYPES: Final[dict[type, int]] = {
    str: pb.DataType.STRING, float: pb.DataType.DOUBLE, int: pb.DataType.INT64,
}
#: The status code of each refusal.
CODES: Final = {
    Refusal.NOT_FOUND: code_pb2.NOT_FOUND,
    Refusal.READ_ONLY: code_pb2.PERMISSION_DENIED,
    Refusal.INVALID: code_pb2.INVALID_ARGUMENT,
}


def spec(row: Property) -> props.PropertySpec:
    return props.PropertySpec(
        spec=pb.TensorSpec(name=row.key, dtype=DTYPES[row.kind]),
        is_readable=True, is_writable=row.write is not None, is_listable=False,
        description=row.description,
    )


async def handle(table: Properties, request: props.PropertyRequest) -> props.PropertyResponse:
    """A ``PropertyRequest``'s response; :class:`PropertyError` to refuse it."""
    which = request.WhichOneof("payload")
    if which == "read_property":
        row = table.row(request.read_property.key)
        value = tensor_utils.pack_tensor(table.read(row.key), dtype=DTYPES[row.kind])
        return props.PropertyResponse(read_property=props.ReadPropertyResponse(value=value))
    if which == "write_property":
        tensor = request.write_property.value
        if tensor.WhichOneof("payload") is None or list(tensor.shape):
            raise PropertyError(Refusal.INVALID, "a property value is one scalar")
        await table.write(request.write_property.key, tensor_utils.unpack_tensor(tensor))
        return props.PropertyResponse(write_property=props.WritePropertyResponse())
    if which == "list_property":
        key = request.list_property.key
        if key:  # the table is flat: only the root lists anything
            table.row(key)
            return props.PropertyResponse(list_property=props.ListPropertyResponse())
        specs = [spec(row) for row in table.rows.values()]
        return props.PropertyResponse(list_property=props.ListPropertyResponse(values=specs))
    raise PropertyError(Refusal.INVALID, "a PropertyRequest must read, write or list")
