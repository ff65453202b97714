"""The remote as a dm_env_rpc world: at most one, created with settings, joined by at most
one agent at a time, driving the same runtime and state machine as the rewarder.

World settings (CreateWorld, ResetWorld): ``env_id`` (switches the remote's env),
``seed`` (the first sequence's seed), ``mode`` (``realtime``/``lockstep``) and
``frameskip`` (frames per step). All are optional: a world of the remote as it runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np
from dm_env_rpc.v1 import dm_env_rpc_pb2 as pb, tensor_utils

from rewarder import protocol

from .. import agent_port
from ..agent_port import CALLER, RemoteLike
from ..orders import MODES, ResetOrder
from ..properties import Properties, Property

#: The world settings and their Python types.
WORLD_SETTINGS: Final = {"env_id": str, "seed": int, "mode": str, "frameskip": int}


class WorldError(Exception):
    """A world request that cannot be served; ``code`` is a ``google.rpc.Code``."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def unpack_settings(settings: Mapping[str, pb.Tensor]) -> dict[str, Any]:
    """World settings as Python values, each checked; :class:`ValueError` says what is wrong."""
    out: dict[str, Any] = {}
    for name, tensor in settings.items():
        kind = WORLD_SETTINGS.get(name)
        if kind is None:
            raise ValueError(f"unknown world setting {name!r}; the settings are {sorted(WORLD_SETTINGS)}")
        if list(tensor.shape) or tensor.WhichOneof("payload") is None:
            raise ValueError(f"world setting {name!r} must be one scalar")
        value = tensor_utils.unpack_tensor(tensor)
        if kind is str and not isinstance(value, str):
            raise ValueError(f"world setting {name!r} is a string, not {value!r}")
        if kind is int and (isinstance(value, bool | np.bool_) or not isinstance(value, int | np.integer)):
            raise ValueError(f"world setting {name!r} is an integer, not {value!r}")
        out[name] = kind(value)
    check_settings(out)
    return out


#: JoinWorld's settings: ``player``, the player of a multi-player runtime to seat the agent
#: in (default 0).
JOIN_SETTINGS: Final = {"player": int}


def unpack_join_settings(settings: Mapping[str, pb.Tensor]) -> dict[str, Any]:
    """JoinWorld settings as Python values; :class:`ValueError` says what is wrong."""
    out: dict[str, Any] = {}
    for name, tensor in settings.items():
        if name not in JOIN_SETTINGS:
            raise ValueError(
                f"unknown JoinWorld setting {name!r}; JoinWorld takes {sorted(JOIN_SETTINGS)} "
                "(world settings go to CreateWorld or ResetWorld)"
            )
        if list(tensor.shape) or tensor.WhichOneof("payload") is None:
            raise ValueError(f"JoinWorld setting {name!r} must be one scalar")
        value = tensor_utils.unpack_tensor(tensor)
        if isinstance(value, bool | np.bool_) or not isinstance(value, int | np.integer):
            raise ValueError(f"JoinWorld setting {name!r} is an integer, not {value!r}")
        out[name] = int(value)
    return out


def check_settings(settings: Mapping[str, Any]) -> None:
    """Refuse values the remote would refuse, before anything changes."""
    mode = settings.get("mode")
    if mode is not None and mode not in MODES:
        raise ValueError(f"mode must be one of {list(MODES)}, not {mode!r}")
    frameskip = settings.get("frameskip")
    if frameskip is not None and not 1 <= frameskip <= protocol.MAX_STEP_FRAMES:
        raise ValueError(
            f"frameskip must be in [1, {protocol.MAX_STEP_FRAMES}] (MAX_STEP_FRAMES), not {frameskip}"
        )
    seed = settings.get("seed")
    if seed is not None and not 0 <= seed <= protocol.MAX_SEED:
        raise ValueError(f"seed must be in [0, {protocol.MAX_SEED}], not {seed}")


@dataclass
class World:
    """The one world of a remote: its name, settings, and who has joined it."""

    remote: RemoteLike
    name: str
    frameskip: int = 1
    #: The seed of the next sequence (None: the remote picks one).
    seed: int | None = None
    #: The connection joined to the world, if any.
    joined: object | None = None
    #: Multi-player runtimes: player -> the connection joined as that player.
    seated: dict[int, object] = field(default_factory=dict)
    properties: Properties = field(init=False)

    def __post_init__(self) -> None:
        remote = self.remote
        shared = [row for key, row in remote.property_table.rows.items() if key != "mode"]
        self.properties = Properties([
            *shared,
            Property("mode", str, "realtime or lockstep; writing it starts a new sequence",
                     lambda: remote.mode, self._write_mode),
            Property("frameskip", int, "frames each step advances (waits, in real time)",
                     lambda: self.frameskip, self._write_frameskip),
            Property("seed", int, "the seed of the next sequence (-1: the remote picks)",
                     lambda: -1 if self.seed is None else self.seed, self._write_seed),
        ])

    async def apply(self, settings: Mapping[str, Any], start: bool) -> None:
        """Take the settings on. ``start``: begin a new sequence under them now; else the
        env and mode switch now (if asked) and the seed waits for the first sequence."""
        if "frameskip" in settings:
            self.frameskip = int(settings["frameskip"])
        if "seed" in settings:
            self.seed = int(settings["seed"])
        env_id, mode = settings.get("env_id"), settings.get("mode")
        if start:
            await self.reset(env_id, mode)
        elif env_id is not None or mode is not None:
            await self.reset(env_id, mode, seeded=False)

    async def reset(self, env_id: str | None = None, mode: str | None = None,
                    seeded: bool = True) -> int:
        """A new episode of the remote (maybe of another env or mode); its id. ``seeded``:
        under the world's pending seed, which it uses up (the next follow from it). The
        share of the agent served now (:data:`~envserver.agent_port.CALLER`) of a joint
        reset; :class:`~envserver.orders.Refused` refuses."""
        order = ResetOrder(env_id=env_id, seed=self.seed if seeded else None, mode=mode)
        episode = await agent_port.reset(self.remote, order, CALLER.get())
        if seeded:
            self.seed = None
        return episode

    # Property writers -----------------------------------------------------------------

    async def _write_mode(self, mode: str) -> None:
        check_settings({"mode": mode})
        await self.reset(mode=mode)

    async def _write_frameskip(self, frameskip: int) -> None:
        check_settings({"frameskip": frameskip})
        self.frameskip = frameskip

    async def _write_seed(self, seed: int) -> None:
        if seed != -1:
            check_settings({"seed": seed})
        self.seed = None if seed == -1 else seed
