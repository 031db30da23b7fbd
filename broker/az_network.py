"""AZs as network hosts: one Linux network namespace per AZ, the inter-AZ path through a
user-space relay, kernel byte counters per AZ pair, and partitions (`kipper cluster up
--netns`, `kipper cluster partition`, tests/support/az_network.py; docs/cluster.md).

The namespaces of one cluster are named ``kipper-<owner pid>-<name>``:

- ``kipper-P-<az>``, one per AZ: the AZ's brokers and its clients. Addresses on its loopback:
  ``10.S.I.1`` for clients and ``10.S.I.(10+node)`` for broker ``node`` (S: the cluster's
  subnet, I: the AZ's number from 1). One veth ``to-zJ`` per other AZ J, one ``region``.
- ``kipper-P-region``: the embedded S3 server on ``10.S.0.2`` (the region's object store)
  and the way in from the host: a veth ``kipP`` in the host's namespace with a route to
  ``10.S.0.0/16`` through the region and no address, so host processes (the launcher, tests, bench) reach every
  broker with their own address, through the region namespace, which forwards.
- ``kipper-P-fabric``: the other end of every AZ link (``zI-zJ``, ``zI-rg``, ``rg-zI``) and
  the relay (broker/az_relay.py) that carries frames between them, delayed on inter-AZ
  links, dropped where a partition cuts.

Nothing routes between AZs but the relay, so the kernel's counters of ``to-zJ`` in AZ I are
every byte that crossed from I to J and back. A launcher killed with -9 leaves its
namespaces: the next one (or the test support) removes those whose owner is gone.
"""

from __future__ import annotations

import ctypes
import fcntl
import ipaddress
import json
import os
import re
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")
NETNS_DIR = Path("/run/netns")
PREFIX = "kipper-"
OWNED = re.compile(r"kipper-(\d+)-")
CLONE_NEWNET = 0x40000000
# Subnets 10.S.0.0/16 for S in this range; one cluster each, chosen under a lock.
SUBNETS = range(200, 255)
SUBNET_LOCK = Path("/run/lock/kipper-netns.lock")
AZ_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,40}$")
REGION_ADDRESS_HOST = 2
CLIENT_ADDRESS_HOST = 1
BROKER_ADDRESS_BASE = 10


class NetnsError(RuntimeError):
    """The AZ network cannot be made (not root, no iproute2, a bad AZ name)."""


@dataclass(frozen=True)
class AzLayout:
    """Where everything of one namespaced cluster is: written by the launcher as
    DATA_DIR/network.json, read by `kipper cluster partition` and the tests."""

    owner: int
    subnet: int
    azs: list[str]
    # node id -> AZ
    brokers: dict[int, str]
    inter_az_rtt_ms: float = 0.0
    relay_pid: int | None = None
    rules_path: str = ""

    # -- names and addresses
    def netns(self, az: str) -> str:
        return f"{PREFIX}{self.owner}-{az}"

    @property
    def region_netns(self) -> str:
        return f"{PREFIX}{self.owner}-region"

    @property
    def fabric_netns(self) -> str:
        return f"{PREFIX}{self.owner}-fabric"

    @property
    def host_link(self) -> str:
        return f"kip{self.owner}"

    @property
    def namespaces(self) -> list[str]:
        return [self.fabric_netns, self.region_netns, *(self.netns(az) for az in self.azs)]

    def az_number(self, az: str) -> int:
        return self.azs.index(az) + 1

    def network(self, az: str | None = None) -> str:
        """The AZ's /24 (the region's with None); the cluster's /16 is ``cidr``."""
        return f"10.{self.subnet}.{self.az_number(az) if az else 0}.0/24"

    @property
    def cidr(self) -> str:
        return f"10.{self.subnet}.0.0/16"

    def client_address(self, az: str) -> str:
        return f"10.{self.subnet}.{self.az_number(az)}.{CLIENT_ADDRESS_HOST}"

    def broker_address(self, node: int) -> str:
        return (f"10.{self.subnet}.{self.az_number(self.brokers[node])}."
                f"{BROKER_ADDRESS_BASE + node}")

    @property
    def s3_address(self) -> str:
        return f"10.{self.subnet}.0.{REGION_ADDRESS_HOST}"

    def az_pairs(self) -> list[tuple[str, str]]:
        return [(a, b) for i, a in enumerate(self.azs) for b in self.azs[i + 1:]]

    # -- the relay's links: frames received on the first interface leave by the second
    def relay_links(self) -> list[tuple[str, str, bool]]:
        """(fabric interface, its peer, delayed?) for each direction of each link."""
        links = []
        for a, b in self.az_pairs():
            i, j = self.az_number(a), self.az_number(b)
            links += [(f"z{i}-z{j}", f"z{j}-z{i}", True), (f"z{j}-z{i}", f"z{i}-z{j}", True)]
        for az in self.azs:
            i = self.az_number(az)
            links += [(f"z{i}-rg", f"rg-z{i}", False), (f"rg-z{i}", f"z{i}-rg", False)]
        return links

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(asdict(self), indent=1))

    @classmethod
    def load(cls, path: Path) -> AzLayout:
        raw = json.loads(path.read_text())
        raw["brokers"] = {int(node): az for node, az in raw["brokers"].items()}
        return cls(**raw)


# -- running things in a namespace

def enter(netns: str) -> None:
    """Move the calling thread into ``netns``; threads and processes it starts later are
    there too (sockets belong to the namespace of the thread that opens them)."""
    fd = os.open(NETNS_DIR / netns, os.O_RDONLY)
    try:
        if ctypes.CDLL(None, use_errno=True).setns(fd, CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), f"setns into {netns}")
    finally:
        os.close(fd)


def call_in(netns: str, work: Callable[..., T], *args, **kwargs) -> T:
    """``work(*args, **kwargs)`` run by a thread of its own inside ``netns``: the sockets it
    opens, and those of the threads it starts (librdkafka's), are that namespace's; the
    caller's thread stays where it is."""
    outcome: dict[str, object] = {}

    def run() -> None:
        try:
            enter(netns)
            outcome["result"] = work(*args, **kwargs)
        except BaseException as error:  # handed to the caller
            outcome["error"] = error

    thread = threading.Thread(target=run, name=f"in-{netns}")
    thread.start()
    thread.join()
    if "error" in outcome:
        raise outcome["error"]
    return outcome["result"]


def ip(*arguments: str, netns: str | None = None, check: bool = True) -> str:
    command = ["ip", *(("-n", netns) if netns else ()), *arguments]
    done = subprocess.run(command, capture_output=True, text=True)
    if check and done.returncode != 0:
        raise NetnsError(f"{' '.join(command)}: {done.stderr.strip()}")
    return done.stdout


def sysctl(netns: str, name: str, value: str) -> None:
    done = subprocess.run(["ip", "netns", "exec", netns, "sysctl", "-qw", f"{name}={value}"],
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise NetnsError(f"sysctl {name} in {netns}: {done.stderr.strip()}")


def require_root() -> None:
    if os.geteuid() != 0:
        raise NetnsError("--netns needs root (it creates network namespaces): run as root "
                         "or without --netns")
    try:
        subprocess.run(["ip", "-V"], capture_output=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        raise NetnsError("--netns needs iproute2's `ip` command") from None


def owner_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


def cluster_namespaces() -> dict[int, list[str]]:
    """Every kipper namespace by owner pid."""
    owned: dict[int, list[str]] = {}
    if NETNS_DIR.is_dir():
        for entry in sorted(NETNS_DIR.iterdir()):
            if match := OWNED.match(entry.name):
                owned.setdefault(int(match.group(1)), []).append(entry.name)
    return owned


def remove_namespaces(names: list[str]) -> None:
    """Deleting a namespace deletes its veths, their peers and the routes over them."""
    for name in names:
        ip("netns", "del", name, check=False)


def remove_stale() -> list[str]:
    """Remove the namespaces of clusters whose launcher is gone (kill -9); their names."""
    stale = [name for owner, names in cluster_namespaces().items() if not owner_alive(owner)
             for name in names]
    remove_namespaces(stale)
    return stale


# -- building and removing a cluster's network

@dataclass
class AzNetwork:
    layout: AzLayout
    created: list[str] = field(default_factory=list)

    @classmethod
    def create(cls, azs: list[str], brokers: dict[int, str], inter_az_rtt_ms: float,
               state_dir: Path) -> AzNetwork:
        """Namespaces, links, addresses and routes for ``brokers`` (node -> AZ); the relay
        is started by the caller (``relay_command``) once this returns."""
        require_root()
        for az in azs:
            if not AZ_NAME.match(az):
                raise NetnsError(f"AZ name {az!r} cannot name a namespace: use letters, "
                                 "digits, '.', '_' or '-'")
        remove_stale()
        SUBNET_LOCK.parent.mkdir(parents=True, exist_ok=True)
        with open(SUBNET_LOCK, "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            layout = AzLayout(os.getpid(), _free_subnet(), list(azs), dict(brokers),
                              inter_az_rtt_ms, rules_path=str(state_dir / "partitions.json"))
            # A new cluster starts whole: cuts of an earlier run in this directory are gone.
            Path(layout.rules_path).unlink(missing_ok=True)
            network = cls(layout)
            try:
                network._build()
            except BaseException:
                network.remove()
                raise
        return network

    def _build(self) -> None:
        layout = self.layout
        for name in layout.namespaces:
            ip("netns", "add", name)
            self.created.append(name)
            ip("link", "set", "lo", "up", netns=name)
            # Only what the cluster sends: no IPv6 router solicitations in the counters.
            sysctl(name, "net.ipv6.conf.all.disable_ipv6", "1")
            sysctl(name, "net.ipv6.conf.default.disable_ipv6", "1")
        fabric, region = layout.fabric_netns, layout.region_netns
        ip("addr", "add", f"{layout.s3_address}/32", "dev", "lo", netns=region)
        for az in layout.azs:
            netns, i = layout.netns(az), layout.az_number(az)
            client = layout.client_address(az)
            ip("addr", "add", f"{client}/32", "dev", "lo", netns=netns)
            for node, broker_az in layout.brokers.items():
                if broker_az == az:
                    ip("addr", "add", f"{layout.broker_address(node)}/32", "dev", "lo",
                       netns=netns)
            for other in layout.azs:
                if other != az:
                    j = layout.az_number(other)
                    self._veth(fabric, f"z{i}-z{j}", netns, f"to-z{j}")
                    ip("route", "add", layout.network(other), "dev", f"to-z{j}", "src", client,
                       netns=netns)
            self._veth(fabric, f"z{i}-rg", netns, "region")
            # Through the region namespace, which forwards to the host.
            ip("route", "add", "default", "via", layout.s3_address, "dev", "region", "onlink",
               "src", client, netns=netns)
            self._veth(fabric, f"rg-z{i}", region, f"to-z{i}")
            ip("route", "add", layout.network(az), "dev", f"to-z{i}", "src", layout.s3_address,
               netns=region)
        ip("link", "add", layout.host_link, "type", "veth", "peer", "name", "host", "netns",
           region)
        ip("link", "set", layout.host_link, "up")
        ip("link", "set", "host", "up", netns=region)
        ip("route", "add", "default", "dev", "host", "src", layout.s3_address, netns=region)
        sysctl(region, "net.ipv4.ip_forward", "1")
        ip("route", "add", layout.cidr, "via", layout.s3_address, "dev", layout.host_link,
           "onlink")

    @staticmethod
    def _veth(netns_a: str, name_a: str, netns_b: str, name_b: str) -> None:
        ip("link", "add", name_a, "type", "veth", "peer", "name", name_b, "netns", netns_b,
           netns=netns_a)
        ip("link", "set", name_a, "up", netns=netns_a)
        ip("link", "set", name_b, "up", netns=netns_b)

    def relay_command(self) -> list[str]:
        layout = self.layout
        links = [f"{a}:{b}:{int(delayed)}" for a, b, delayed in layout.relay_links()]
        return [sys.executable, "-m", "broker.az_relay", "--one-way-delay-ms",
                str(layout.inter_az_rtt_ms / 2), "--rules", layout.rules_path, *links]

    def remove(self) -> None:
        remove_namespaces(list(reversed(self.created)))
        self.created.clear()


def _free_subnet() -> int:
    """A 10.S.0.0/16 no route of the host's namespace (another cluster's) uses."""
    routes = ip("-4", "route", "show")
    for subnet in SUBNETS:
        prefix = ipaddress.ip_network(f"10.{subnet}.0.0/16")
        if not any(ipaddress.ip_network(word, strict=False).overlaps(prefix)
                   for word in (line.split()[0] for line in routes.splitlines())
                   if word[0].isdigit()):
            return subnet
    raise NetnsError("no free 10.S.0.0/16 subnet for the AZ network (S in 200..254)")


# -- kernel counters

# Ethernet (14) + IPv4 (20) + TCP with timestamps (32): the headers of one frame of a
# connection, counted once per frame however much payload it carries.
FRAME_HEADER_BYTES = 66


@dataclass(frozen=True)
class LinkBytes:
    """Bytes and frames the kernel counted on the link between two AZs, by direction."""

    a: str
    b: str
    a_to_b: int
    b_to_a: int
    frames: int

    @property
    def total(self) -> int:
        return self.a_to_b + self.b_to_a

    @property
    def tcp_payload(self) -> int:
        """What the connections carried: the bytes less every frame's headers."""
        return self.total - self.frames * FRAME_HEADER_BYTES


def inter_az_bytes(layout: AzLayout) -> list[LinkBytes]:
    """The kernel's counters of every inter-AZ link, read on the first AZ's side: Ethernet
    frames with their IP and TCP headers (a segmentation-offloaded frame of up to 64 KiB is
    one frame, with one set of headers)."""
    counted = []
    for a, b in layout.az_pairs():
        j = layout.az_number(b)
        stats = json.loads(ip("-j", "-s", "link", "show", f"to-z{j}", netns=layout.netns(a)))
        tx, rx = stats[0]["stats64"]["tx"], stats[0]["stats64"]["rx"]
        counted.append(LinkBytes(a, b, tx["bytes"], rx["bytes"], tx["packets"] + rx["packets"]))
    return counted


def link_bytes_delta(before: list[LinkBytes], after: list[LinkBytes]) -> list[LinkBytes]:
    earlier = {(x.a, x.b): x for x in before}
    return [LinkBytes(x.a, x.b, x.a_to_b - earlier[x.a, x.b].a_to_b,
                      x.b_to_a - earlier[x.a, x.b].b_to_a, x.frames - earlier[x.a, x.b].frames)
            for x in after]
