"""A two-node Ray cluster on 127.0.0.1 for tests and benchmarks, in a network namespace
of its own.

Ray listens on every interface, advertises the machine's interface address even when
told 127.0.0.1, and probes 8.8.8.8:53 to learn its IP. In a namespace that has only
``lo`` none of that leaves the machine: every node is 127.0.0.1. So the code that runs
a cluster (a scenario script, a benchmark) is started with :func:`in_netns` and calls
:func:`two_node_cluster`, which refuses to start Ray anywhere else. Without a namespace
(not root, no ``unshare``) :func:`check_netns` fails naming why: there is no fallback to
the real interfaces.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

#: The custom resource only the second node has, so a test can place remotes on it.
SECOND_NODE: Final = "second_node"
#: Logical CPUs each node offers (Ray's bookkeeping, not real cores: 16 remotes of
#: 0.25 CPU fit on one node).
CPUS_PER_NODE: Final = 8
#: Seconds ``unshare`` may take to say whether it can make a namespace.
PROBE_TIMEOUT: Final = 10.0
#: What every Ray process here gets: no token file under ~/.ray, no usage report.
RAY_ENV: Final = {"RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}


class NamespaceUnavailable(RuntimeError):
    """No network namespace can be made here; the message says why."""


def check_netns() -> None:
    """Raise :class:`NamespaceUnavailable` unless ``unshare --net`` works here."""
    for tool in ("unshare", "ip"):
        if shutil.which(tool) is None:
            raise NamespaceUnavailable(
                f"`{tool}` is not installed (Debian: util-linux / iproute2): the Ray tests run "
                "their cluster in a network namespace of its own and never on the real interfaces"
            )
    if os.geteuid() != 0:
        raise NamespaceUnavailable(
            "the Ray tests need root for `unshare --net` (a network namespace with only lo); "
            "they never run Ray on the real interfaces"
        )
    probe = subprocess.run(
        in_netns(["true"]), capture_output=True, text=True, timeout=PROBE_TIMEOUT, check=False
    )
    if probe.returncode != 0:
        raise NamespaceUnavailable(
            f"`unshare --net` failed ({probe.returncode}): {probe.stderr.strip()}; the Ray tests "
            "need a network namespace of their own (a container may forbid it: --privileged)"
        )


def in_netns(argv: list[str]) -> list[str]:
    """``argv`` run in a new network namespace whose only interface, lo, is up."""
    return ["unshare", "--net", "sh", "-c", 'ip link set lo up && exec "$@"', "sh", *argv]


#: The address :func:`in_netns_routed` gives its second interface: off loopback, routed,
#: so Ray takes it for the node's as on a real machine, yet nothing leaves the namespace.
ROUTED_ADDRESS: Final = "10.200.0.1"


def in_netns_routed(argv: list[str]) -> list[str]:
    """``argv`` in a new network namespace with lo and a veth pair (:data:`ROUTED_ADDRESS`,
    the default route): what Ray sees on a machine with a network, its peer in the same
    namespace."""
    setup = (
        "ip link set lo up && ip link add ur0 type veth peer name ur1 && "
        f"ip addr add {ROUTED_ADDRESS}/24 dev ur0 && ip link set ur0 up && ip link set ur1 up && "
        "ip route add default dev ur0"
    )
    return ["unshare", "--net", "sh", "-c", f'{setup} && exec "$@"', "sh", *argv]


def listening_addresses() -> set[str]:
    """The local addresses of every TCP socket listening in this process's namespace
    (/proc/net/tcp and tcp6, which are per namespace), e.g. {"127.0.0.1", "::"}."""
    found = set()
    for name, width in (("tcp", 4), ("tcp6", 16)):
        for line in Path(f"/proc/net/{name}").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] != "0A":  # TCP_LISTEN
                continue
            packed = bytes.fromhex(fields[1].split(":")[0])
            # the kernel prints each 32-bit word in host (little-endian) order
            raw = b"".join(packed[i:i + 4][::-1] for i in range(0, width, 4))
            address = ipaddress.ip_address(raw)
            if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped:
                address = address.ipv4_mapped
            found.add(str(address))
    return found


def interfaces() -> list[str]:
    """The network interfaces of this process's namespace (/proc/net/dev is per namespace;
    /sys/class/net shows the namespace sysfs was mounted in)."""
    lines = Path("/proc/net/dev").read_text().splitlines()[2:]
    return sorted(line.split(":", 1)[0].strip() for line in lines)


@dataclass(frozen=True)
class TwoNodes:
    """A running cluster: the Cluster object and the node ids of its head and second node."""

    cluster: Any
    head: str
    second: str


@contextmanager
def two_node_cluster(cpus_per_node: int = CPUS_PER_NODE) -> Iterator[TwoNodes]:
    """A head and a second node (with :data:`SECOND_NODE`) on 127.0.0.1, this process
    connected to them as the driver; stopped on exit. Only inside a namespace with no
    interface but lo."""
    seen = interfaces()
    if seen != ["lo"]:
        raise NamespaceUnavailable(
            f"refusing to start Ray with interfaces {seen}: run this under tests.ray_cluster.in_netns"
        )
    os.environ.update(RAY_ENV)
    import ray
    from ray.cluster_utils import Cluster

    cluster = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": cpus_per_node, "include_dashboard": False},
    )
    try:
        cluster.add_node(num_cpus=cpus_per_node, resources={SECOND_NODE: 1000})
        ray.init(address=cluster.address, logging_level=logging.WARNING)
        cluster.wait_for_nodes()
        nodes = [n for n in ray.nodes() if n["Alive"]]
        addresses = {n["NodeManagerAddress"] for n in nodes}
        if addresses != {"127.0.0.1"}:
            raise NamespaceUnavailable(f"Ray's nodes advertise {addresses}, not only 127.0.0.1")
        (second,) = [n["NodeID"] for n in nodes if SECOND_NODE in n["Resources"]]
        (head,) = [n["NodeID"] for n in nodes if SECOND_NODE not in n["Resources"]]
        yield TwoNodes(cluster, head, second)
    finally:
        ray.shutdown()
        cluster.shutdown()
