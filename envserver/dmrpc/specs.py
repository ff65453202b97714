"""A runtime's observations and actions as dm_env_rpc tensor specs, and actions back as
the remote's input events.

Observations: ``RGB`` (the screen), ``reward`` (since the last step), ``text`` (the
runtime's latest instruction or status line), ``episode_id`` and ``frame`` (the remote's
frame number); a browser remote's also ``page``: its page structure as the JSON text of a
``v0.env.observation`` body (``frame``, ``page``: docs/browser.md), made when requested,
and ``last_action_error`` (what the step's ``web_action`` could not do; "" when it ran).
Actions, each optional in a step (what is not sent stays as it was, as
held keys do over VNC): ``keys`` (one 0/1 per key the runtime reacts to: held or not),
``action`` (an index into the runtime's discrete action set, where it has one: Atari's
minimal set, held until the next ``action`` or ``keys``), ``pointer`` (x, y on the screen)
and ``buttons`` (the pointer's button mask); a browser remote's also ``web_action``, a
BrowserGym action string (``"click('a12')"``, docs/browser.md) run after the events.
Out-of-spec actions raise :class:`SpecError` naming the action and its bounds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np
from dm_env_rpc.v1 import dm_env_rpc_pb2 as pb, tensor_spec_utils, tensor_utils

from rewarder.protocol import MAX_ACTION_STRING_CHARS

from ..agent_port import Held

#: Observation names, in UID order (UIDs start at 1: 0 reads as "unset" in protobuf).
RGB: Final = "RGB"
REWARD: Final = "reward"
TEXT: Final = "text"
EPISODE_ID: Final = "episode_id"
FRAME: Final = "frame"
PAGE: Final = "page"
LAST_ACTION_ERROR: Final = "last_action_error"
OBSERVATIONS: Final = (RGB, REWARD, TEXT, EPISODE_ID, FRAME)  # and PAGE..., for browsers
#: Action names (those a runtime has, in this order).
KEYS: Final = "keys"
ACTION: Final = "action"
POINTER: Final = "pointer"
BUTTONS: Final = "buttons"
WEB_ACTION: Final = "web_action"
#: Characters of one ``web_action``: what the remote's parser takes.
MAX_WEB_ACTION_CHARS: Final = MAX_ACTION_STRING_CHARS


class SpecError(ValueError):
    """A request the specs do not allow (an action, an observation UID); the message
    names it and says what is allowed."""


def _spec(name: str, dtype: int, shape: Sequence[int] = (), bounds: tuple[Any, Any] | None = None
          ) -> pb.TensorSpec:
    spec = pb.TensorSpec(name=name, dtype=dtype, shape=list(shape))
    if bounds is not None:
        tensor_spec_utils.set_bounds(spec, *bounds)
    return spec


@dataclass(frozen=True)
class Specs:
    """The specs of one runtime (they change only with the env or its screen)."""

    width: int
    height: int
    keys: tuple[str, ...] = ()
    #: Keys each discrete action holds (Atari's ``action_keys``); empty: no ``action``.
    action_keys: tuple[tuple[str, ...], ...] = ()
    buttons: int = 0
    #: Whether there is a page to observe (a browser remote's): the ``page`` observation.
    page: bool = False
    proto: pb.ActionObservationSpecs = field(init=False, repr=False, compare=False)
    #: Action name of each UID.
    actions_by_uid: dict[int, str] = field(init=False, repr=False, compare=False)

    @classmethod
    def of(cls, describe: Mapping[str, Any], page: bool = False) -> Specs:
        """The specs of the runtime a describe body talks about (``page``: it has one)."""
        return cls(
            width=int(describe["width"]), height=int(describe["height"]),
            keys=tuple(describe.get("keys") or ()),
            action_keys=tuple(tuple(keys) for keys in describe.get("action_keys") or ()),
            buttons=int(describe.get("buttons") or 0), page=page,
        )

    def __post_init__(self) -> None:
        observations = [
            _spec(RGB, pb.DataType.UINT8, (self.height, self.width, 3)),
            _spec(REWARD, pb.DataType.DOUBLE),
            _spec(TEXT, pb.DataType.STRING),
            _spec(EPISODE_ID, pb.DataType.INT64),
            _spec(FRAME, pb.DataType.INT64),
            *([_spec(PAGE, pb.DataType.STRING), _spec(LAST_ACTION_ERROR, pb.DataType.STRING)]
              if self.page else []),
        ]
        actions: list[pb.TensorSpec] = []
        if self.keys:
            actions.append(_spec(KEYS, pb.DataType.UINT8, (len(self.keys),), (0, 1)))
        if self.action_keys:
            actions.append(_spec(ACTION, pb.DataType.INT32, (), (0, len(self.action_keys) - 1)))
        if self.buttons:
            actions.append(_spec(POINTER, pb.DataType.INT32, (2,),
                                 ([0, 0], [self.width - 1, self.height - 1])))
            actions.append(_spec(BUTTONS, pb.DataType.UINT8, (), (0, self.buttons)))
        if self.page:
            actions.append(_spec(WEB_ACTION, pb.DataType.STRING))
        proto = pb.ActionObservationSpecs(
            observations={uid: spec for uid, spec in enumerate(observations, 1)},
            actions={uid: spec for uid, spec in enumerate(actions, 1)},
        )
        object.__setattr__(self, "proto", proto)
        object.__setattr__(self, "actions_by_uid", {uid: s.name for uid, s in proto.actions.items()})

    @property
    def observations_by_uid(self) -> Mapping[int, pb.TensorSpec]:
        return self.proto.observations  # type: ignore[no-any-return]

    def unpack_actions(self, tensors: Mapping[int, pb.Tensor]) -> dict[str, np.ndarray]:
        """Each action tensor as an array of its spec's shape, checked against the spec."""
        out: dict[str, np.ndarray] = {}
        for uid, tensor in tensors.items():
            name = self.actions_by_uid.get(uid)
            if name is None:
                raise SpecError(
                    f"no action has UID {uid}; this world's actions are "
                    f"{dict(sorted(self.actions_by_uid.items()))} (UID: name)"
                )
            out[name] = _check(self.proto.actions[uid], tensor)
        if KEYS in out and ACTION in out:
            raise SpecError(f"send {KEYS!r} or {ACTION!r} in a step, not both: each sets the held keys")
        return out


def _check(spec: pb.TensorSpec, tensor: pb.Tensor) -> np.ndarray:
    """The tensor's value, broadcast to the spec's shape, if its type, shape and bounds fit."""
    want = tensor_utils.data_type_to_np_type(spec.dtype)
    payload = tensor.WhichOneof("payload")
    if payload is None:
        raise SpecError(f"action {spec.name!r} has no payload")
    got = tensor_utils.get_tensor_type(tensor)
    if got != want:
        raise SpecError(f"action {spec.name!r} must be {np.dtype(want).name}, not {np.dtype(got).name}")
    if spec.dtype == pb.DataType.STRING:
        return _string(spec, tensor)
    shape = list(tensor.shape)
    if len(shape) != len(spec.shape) or sum(1 for d in shape if d < 0) > 1:
        raise SpecError(
            f"action {spec.name!r} has shape {shape}; its spec's shape is {list(spec.shape)} "
            "(one dimension may be -1, or send a single value to broadcast)"
        )
    try:
        value = np.asarray(tensor_utils.unpack_tensor(tensor))
        value = np.broadcast_to(value, tuple(spec.shape))
    except ValueError as exc:
        raise SpecError(f"action {spec.name!r} does not fit shape {list(spec.shape)}: {exc}") from None
    bounds = tensor_spec_utils.bounds(spec)
    if np.any(value < bounds.min) or np.any(value > bounds.max):
        raise SpecError(
            f"action {spec.name!r} = {value.tolist()} is out of bounds: "
            f"min {np.asarray(bounds.min).tolist()}, max {np.asarray(bounds.max).tolist()}"
        )
    return value


def _string(spec: pb.TensorSpec, tensor: pb.Tensor) -> np.ndarray:
    """A string action's value (one string, at most :data:`MAX_WEB_ACTION_CHARS`)."""
    strings = list(tensor.strings.array)
    if len(strings) != 1 or any(d != 1 for d in tensor.shape):
        raise SpecError(f"action {spec.name!r} is one string, not {len(strings)}")
    if len(strings[0]) > MAX_WEB_ACTION_CHARS:
        raise SpecError(
            f"action {spec.name!r} is {len(strings[0])} characters; at most "
            f"{MAX_WEB_ACTION_CHARS} (MAX_WEB_ACTION_CHARS): send one short call, e.g. click('a12')"
        )
    return np.asarray(strings[0], dtype=object)


def action_events(held: Held, specs: Specs, actions: Mapping[str, np.ndarray]) -> list[Any]:
    """The input events that take what ``held`` holds to what ``actions`` ask for."""
    events: list[Any] = []
    if KEYS in actions:
        want = {key for key, down in zip(specs.keys, actions[KEYS].tolist(), strict=True) if down}
        events += held.keys_to(want)
    if ACTION in actions:
        events += held.keys_to(set(specs.action_keys[int(actions[ACTION])]))
    x, y = held.pointer
    if POINTER in actions:
        x, y = (int(v) for v in actions[POINTER].tolist())
    buttons = int(actions[BUTTONS]) if BUTTONS in actions else held.buttons
    return events + held.pointer_to(x, y, buttons)


def check_requested(specs: Specs, requested: Sequence[int]) -> None:
    """Refuse an observation UID the specs do not have, naming those they do."""
    by_uid = specs.observations_by_uid
    for uid in requested:
        if uid not in by_uid:
            names = {u: s.name for u, s in sorted(by_uid.items())}
            raise SpecError(
                f"no observation has UID {uid}; this world's observations are {names} (UID: name)"
            )


def pack_observations(
    specs: Specs, requested: Sequence[int], values: Mapping[str, Any]
) -> dict[int, pb.Tensor]:
    """The requested observations (each UID once; checked already) as tensors."""
    by_uid = specs.observations_by_uid
    out: dict[int, pb.Tensor] = {}
    for uid in requested:
        if uid not in out:
            spec = by_uid[uid]
            out[uid] = tensor_utils.pack_tensor(values[spec.name], dtype=spec.dtype)
    return out
