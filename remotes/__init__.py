"""The agent side: gymnasium envs over one or many remotes.

    import gymnasium as gym
    import remotes

    gym.register_envs(remotes)                      # ids universe-remote/<env id>
    env = gym.make("universe-remote/builtin.Catch-v0")
    from remotes import RemoteEnv, RemoteVectorEnv, start_local, start_ray

Importing this package registers an id for every environment this install knows
(:mod:`remotes.registration`). The ``universe-remote`` command does not import it for
``serve``, so a remote never loads gymnasium.
"""

from __future__ import annotations

from .address import RemoteAddress, parse_remotes
from .containers import DockerRemotes, DockerUnavailable, start_docker
from .env import RemoteEnv
from .local import LocalRemotes, start_local
from .options import EnvOptions
from .ray import RayRemotes, RayUnavailable, start_ray  # imports Ray only when called
from .registration import NAMESPACE, make_env, make_vector_env, register
from .session import RemoteUnavailable
from .spaces import VNCActionSpace
from .vector import RemoteVectorEnv
from .vector_wrappers import VectorDiscreteClicks, VectorDiscreteKeys, VectorPointerBox
from .wrappers import DiscreteClicks, DiscreteKeys, PointerBox

__all__ = [
    "NAMESPACE",
    "DiscreteClicks",
    "DiscreteKeys",
    "DockerRemotes",
    "DockerUnavailable",
    "EnvOptions",
    "LocalRemotes",
    "PointerBox",
    "RayRemotes",
    "RayUnavailable",
    "RemoteAddress",
    "RemoteEnv",
    "RemoteUnavailable",
    "RemoteVectorEnv",
    "VNCActionSpace",
    "VectorDiscreteClicks",
    "VectorDiscreteKeys",
    "VectorPointerBox",
    "make_env",
    "make_vector_env",
    "parse_remotes",
    "register",
    "start_docker",
    "start_local",
    "start_ray",
]

register()
