"""A minimal dm_env_rpc server over ALE: the peer the lockstep benchmarks measure our
remote against ("what a dm_env_rpc user would write in an afternoon").

One world, one agent; Step advances FRAMESKIP frames holding the chosen action of Pong's
minimal set and returns the RGB frame and the reward; no specs beyond those, no checks
beyond what dm_env_rpc's ``SpecManager`` does. Run as a process:
``python -m benchmarks.dm_peer PORT`` (binds 127.0.0.1), prints ``ready`` when serving.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from concurrent import futures
from typing import Any, Final

import grpc
import numpy as np
from dm_env_rpc.v1 import (
    dm_env_rpc_pb2 as pb,
    dm_env_rpc_pb2_grpc as pb_grpc,
    spec_manager,
    tensor_spec_utils,
)

from benchmarks.atari_common import FRAMESKIP, ROM

#: The world's name (there is only one).
WORLD: Final = "pong"


def _specs(actions: int) -> pb.ActionObservationSpecs:
    action = pb.TensorSpec(name="action", dtype=pb.DataType.INT32)
    tensor_spec_utils.set_bounds(action, 0, actions - 1)
    return pb.ActionObservationSpecs(
        actions={1: action},
        observations={
            1: pb.TensorSpec(name="RGB", dtype=pb.DataType.UINT8, shape=[210, 160, 3]),
            2: pb.TensorSpec(name="reward", dtype=pb.DataType.DOUBLE),
        },
    )


class Peer(pb_grpc.EnvironmentServicer):  # type: ignore[misc]
    def __init__(self) -> None:
        from ale_py import ALEInterface, LoggerMode, roms

        ALEInterface.setLoggerMode(LoggerMode.Error)
        self.ale = ALEInterface()
        self.ale.setInt("random_seed", 0)
        self.ale.setFloat("repeat_action_probability", 0.0)
        self.ale.loadROM(roms.get_rom_path(ROM))
        self.actions = self.ale.getMinimalActionSet()
        self.specs = _specs(len(self.actions))
        self.observations = spec_manager.SpecManager(self.specs.observations)
        self.inputs = spec_manager.SpecManager(self.specs.actions)

    def Process(  # noqa: N802 - the gRPC method's name
        self, requests: Iterator[pb.EnvironmentRequest], context: Any
    ) -> Iterator[pb.EnvironmentResponse]:
        running = False
        for request in requests:
            which = request.WhichOneof("payload")
            if which == "create_world":
                yield pb.EnvironmentResponse(create_world=pb.CreateWorldResponse(world_name=WORLD))
            elif which == "join_world":
                running = False
                yield pb.EnvironmentResponse(join_world=pb.JoinWorldResponse(specs=self.specs))
            elif which == "reset":
                running = False
                yield pb.EnvironmentResponse(reset=pb.ResetResponse(specs=self.specs))
            elif which == "step":
                reward = 0.0
                if running:
                    action = int(self.inputs.unpack(request.step.actions)["action"])
                    for _ in range(FRAMESKIP):
                        reward += self.ale.act(self.actions[action])
                else:
                    self.ale.reset_game()
                    running = True
                state = pb.EnvironmentStateType.RUNNING
                if self.ale.game_over():
                    state, running = pb.EnvironmentStateType.TERMINATED, False
                packed = self.observations.pack(
                    {"RGB": self.ale.getScreenRGB(), "reward": np.float64(reward)}
                )
                wanted = set(request.step.requested_observations)
                observations = {uid: t for uid, t in packed.items() if uid in wanted}
                yield pb.EnvironmentResponse(step=pb.StepResponse(state=state, observations=observations))
            elif which == "leave_world":
                yield pb.EnvironmentResponse(leave_world=pb.LeaveWorldResponse())
            elif which == "destroy_world":
                yield pb.EnvironmentResponse(destroy_world=pb.DestroyWorldResponse())
            else:
                yield pb.EnvironmentResponse(error={"code": 12, "message": f"{which} is not supported"})


def main(port: int) -> None:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    pb_grpc.add_EnvironmentServicer_to_server(Peer(), server)
    server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    print("ready", flush=True)
    server.wait_for_termination()


if __name__ == "__main__":
    main(int(sys.argv[1]))
