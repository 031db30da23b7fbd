"""`kipper cluster up`: a local cluster of N brokers in N AZs plus the embedded S3 server.

Every node is a process of its own, as in a real deployment: the S3 server first, then
every broker at once, brokers 0-2 being the controller quorum's voters (KRaft's combined
mode: each runs a controller, the leader's is active). The launcher prints one line per
process, then, once the cluster is usable (every partition has a
leader that answers ListOffsets), the bootstrap string:

    s3: pid=4100 endpoint=http://127.0.0.1:41233
    broker 0: pid=4101 rack=az1 address=127.0.0.1:9092 metrics=http://127.0.0.1:9600
    ...
    bootstrap: 127.0.0.1:9092,127.0.0.1:9093,127.0.0.1:9094

and relays the processes' logs to its stderr, each line prefixed with ``[broker-1] ``. On
Ctrl-C or SIGTERM it stops them all (brokers 3..N-1, the voters, S3: each gets SIGTERM, then
SIGKILL after a grace period). A broker that dies on its own is reported (which, and how)
and the others keep running; ``kipper cluster start-broker N`` starts it again (through
``DATA_DIR/cluster.sock``). If the S3 server dies, it stops the brokers and exits with
status 1. KIPPER_* environment variables reach every broker.

With ``--security sasl-ssl`` (or ``ssl``) the brokers listen on SASL_SSL (or mutual-TLS SSL)
only, with certificates of a development CA made under ``DATA_DIR/tls``; an ``admin`` user
gets a random password and its SCRAM-SHA-512 credential is written by the first active
controller (voters authenticate each other with it before, from their bootstrap setting); the brokers check ACLs, with ``admin`` a super user; the launcher writes
``DATA_DIR/client.properties`` for clients (librdkafka names) and prints its path before the
bootstrap line (docs/security.md).

With ``--netns`` (root) each AZ is a network namespace of its own, joined to the others by
a user-space relay that can add a round-trip time and cut paths (``kipper cluster
partition``); see broker/az_network.py and docs/cluster.md.

The brokers share a cluster secret (``cluster_secret``: brokers prove they hold it before
they may send each other broker-only requests): ``KIPPER_CLUSTER_SECRET`` if it is set, so
a broker started by hand with the same variable can join; otherwise a random one per run,
given to the brokers in their environment, never on a command line.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import dataclasses
import json
import logging
import os
import secrets
import signal
import socket
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import uvloop

from replication.raft import QUORUM_STATE_FILE, QuorumStateFile
from storage.objectstore.embedded import ACCESS_KEY as S3_ACCESS_KEY
from storage.objectstore.embedded import SECRET_KEY as S3_SECRET_KEY
from storage.objectstore.latency import LATENCY_PROFILES

from . import az_network, az_network_cli, az_relay
from .config import split_host_port
from .listening import metrics_url, node_listening, s3_url
from .process_exit import exit_without_teardown

# Imported where they are used, after the children were spawned: what talks to the nodes
# (kio's schemas, the metadata image; broker.readiness) and the dev CA took the launcher
# 0.8 s of CPU before it started any child, at every cluster start.
if TYPE_CHECKING:
    from replication.node_client import NodeClient, NodeSecurity

    from .security.dev_ca import DevCa

log = logging.getLogger("kipper.cluster")

HOST = "127.0.0.1"
READY_TIMEOUT_S = 60.0
PR_SET_PDEATHSIG = 1  # prctl(2)
# Between SIGTERM and SIGKILL, as docker-compose.yml's stop_grace_period: a broker that
# closes 10,000 logs just filled (the page cache still writing back what they took) took
# over 20 s, and a broker killed recovers every log at its next start.
STOP_GRACE_S = 60.0
# While stopping: how often the active controller's broker is asked whether the other voters
# handed over (each answer is a Metadata response of no topic).
HANDOVER_POLL_S = 0.05
# Brokers 0..QUORUM_VOTERS-1 are the controller quorum's voters.
QUORUM_VOTERS = 3
CONTROL_SOCKET = "cluster.sock"


# `kipper cluster up --security`: the listeners' security protocol.
SECURITY_PROTOCOLS = {"none": "PLAINTEXT", "sasl-ssl": "SASL_SSL", "ssl": "SSL"}
ADMIN_USER = "admin"
# The user brokers authenticate to each other as on SASL_SSL.
BROKER_USER = "kipper-broker"
INTER_BROKER_MECHANISM = "SCRAM-SHA-512"


class ClusterError(RuntimeError):
    """A process failed to start, or exited while the cluster was up."""


@dataclass(frozen=True)
class SecureCluster:
    """What a secured local cluster's nodes and clients are given: the dev CA's files and
    the passwords of the admin and broker users (kept in DATA_DIR/passwords.json, so a
    restarted cluster's credentials, written to the metadata log once, still match)."""

    protocol: str
    ca: DevCa
    passwords: dict[str, str]

    @classmethod
    def create(cls, data_dir: Path, protocol: str, brokers: int,
               host_names: tuple[str, ...] = ()) -> SecureCluster:
        from .security.dev_ca import create_dev_ca
        ca = create_dev_ca(data_dir / "tls", range(brokers), host_names, users=[ADMIN_USER])
        path = data_dir / "passwords.json"
        if path.exists():
            passwords = json.loads(path.read_text())
        else:
            passwords = {user: secrets.token_urlsafe(18) for user in (ADMIN_USER, BROKER_USER)}
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as f:
                json.dump(passwords, f)
        return cls(protocol, ca, passwords)

    def node_env(self, node: int) -> dict[str, str]:
        env = {"KIPPER_SSL_KEYSTORE_LOCATION": str(self.ca.brokers[node].keystore),
               "KIPPER_SSL_TRUSTSTORE_LOCATION": str(self.ca.ca_certificate),
               # ACLs decide what every other user may do; admin (and the brokers' own
               # user, which the launcher connects as) may do anything.
               "KIPPER_AUTHORIZER_ENABLED": "true",
               "KIPPER_SUPER_USERS": f"User:{ADMIN_USER};User:{BROKER_USER}"}
        if self.protocol == "SSL":
            env["KIPPER_SSL_CLIENT_AUTH"] = "required"
            # A dev certificate's subject is CN=<user>,OU=...: the principal is User:<user>.
            env["KIPPER_SSL_PRINCIPAL_MAPPING_RULES"] = "RULE:^CN=([^,]+),.*$/$1/,DEFAULT"
        else:
            # The controller writes both users' SCRAM credentials before any client comes.
            env.update({"KIPPER_SASL_SCRAM_BOOTSTRAP_USERS": json.dumps(self.passwords),
                        "KIPPER_INTER_BROKER_SASL_USERNAME": BROKER_USER,
                        "KIPPER_INTER_BROKER_SASL_PASSWORD": self.passwords[BROKER_USER],
                        "KIPPER_SASL_MECHANISM_INTER_BROKER_PROTOCOL": INTER_BROKER_MECHANISM})
        return env

    def node_security(self) -> NodeSecurity:
        """How the launcher itself connects (to wait until the cluster is usable): as a
        broker would, with the admin's certificate on SSL."""
        from replication.node_client import NodeSecurity

        from .security.tls import TlsSettings, client_context
        certificate = self.ca.clients[ADMIN_USER].keystore if self.protocol == "SSL" else None
        context = client_context(TlsSettings(certificate=certificate, ca=self.ca.ca_certificate))
        if self.protocol == "SSL":
            return NodeSecurity(context)
        return NodeSecurity(context, INTER_BROKER_MECHANISM, BROKER_USER,
                            self.passwords[BROKER_USER])

    def write_client_properties(self, data_dir: Path, bootstrap: str) -> Path:
        from .security.dev_ca import write_client_properties
        if self.protocol == "SSL":
            return write_client_properties(
                data_dir / "client.properties", bootstrap, "SSL",
                ca_certificate=self.ca.ca_certificate,
                client_certificate=self.ca.clients[ADMIN_USER])
        return write_client_properties(
            data_dir / "client.properties", bootstrap, "SASL_SSL",
            ca_certificate=self.ca.ca_certificate, sasl_mechanism=INTER_BROKER_MECHANISM,
            sasl_username=ADMIN_USER, sasl_password=self.passwords[ADMIN_USER])


@dataclass
class Child:
    """One process of the cluster, with its logs relayed to our stderr."""

    name: str
    process: asyncio.subprocess.Process
    _relays: list[asyncio.Task] = field(default_factory=list)

    @classmethod
    async def spawn(cls, name: str, command: list[str],
                    env: dict[str, str] | None = None, netns: str | None = None) -> "Child":
        process = await asyncio.create_subprocess_exec(
            *command, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, env=env,
            # Ctrl-C reaches only the launcher, which stops the nodes in order.
            start_new_session=True, preexec_fn=_stop_with(os.getpid(), netns))
        child = cls(name, process)
        child._relays.append(asyncio.create_task(child._relay(process.stderr)))
        return child

    async def expect(self, parse: Callable[[str], str | None]) -> str:
        """Read the next stdout line, which ``parse`` (broker.listening) must understand;
        return what it found."""
        try:
            line = await asyncio.wait_for(self.process.stdout.readline(), READY_TIMEOUT_S)
        except asyncio.TimeoutError:
            raise ClusterError(f"{self.name} printed nothing for {READY_TIMEOUT_S:.0f} s") from None
        found = parse(line.decode(errors="replace"))
        if found is None and not line:
            raise ClusterError(f"{self.name} exited while starting (its log above says why)")
        if found is None:
            raise ClusterError(f"{self.name} did not start: it printed {line!r}")
        return found

    def relay_stdout(self) -> None:
        """After the lines we expect, anything else on stdout goes to the log as well."""
        self._relays.append(asyncio.create_task(self._relay(self.process.stdout)))

    async def _relay(self, stream: asyncio.StreamReader) -> None:
        prefix = f"[{self.name}] ".encode()
        while line := await stream.readline():
            sys.stderr.buffer.write(prefix + line)
            sys.stderr.flush()

    async def stop(self) -> None:
        if self.process.returncode is None:
            try:
                self.process.terminate()
            except ProcessLookupError:  # exited; not reaped yet
                pass
            try:
                await asyncio.wait_for(self.process.wait(), STOP_GRACE_S)
            except asyncio.TimeoutError:
                # Brokers log where their tasks wait on SIGUSR1: say why before killing.
                with contextlib.suppress(ProcessLookupError):
                    self.process.send_signal(signal.SIGUSR1)
            try:
                await asyncio.wait_for(self.process.wait(), 1.0)
            except asyncio.TimeoutError:
                log.warning("%s ignored SIGTERM for %.0f s: killing it", self.name, STOP_GRACE_S)
                self.process.kill()
                await self.process.wait()
        await asyncio.gather(*self._relays)


class Cluster:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.s3: Child | None = None
        self.brokers: dict[int, Child] = {}
        # --netns: the AZ namespaces and the relay between them (broker/az_network.py).
        self.network: az_network.AzNetwork | None = None
        self.relay: Child | None = None
        self.broker_env = {**os.environ, "KIPPER_CLUSTER_SECRET": os.environ.get(
            "KIPPER_CLUSTER_SECRET") or secrets.token_hex(32)}
        protocol = SECURITY_PROTOCOLS[args.security]
        self.secure = (SecureCluster.create(args.data_dir, protocol, args.brokers)
                       if protocol != "PLAINTEXT" else None)
        # Every broker keeps its port across restarts (voters are known by address).
        self.ports = {node: _port(args.base_port, node) for node in range(args.brokers)}
        self.s3_endpoint = ""

    async def start(self) -> None:
        if self.args.netns:
            await self._start_network()
        s3_host = self.network.layout.s3_address if self.network else HOST
        # Its port picked now, so the brokers start with it rather than after it (its
        # interpreter and moto take seconds): a broker waits for the object store to answer.
        s3_port = _port(0, 0)
        self.s3 = await Child.spawn("s3", _python(
            "storage.objectstore.embedded", "--host", s3_host, "--port", str(s3_port),
            "--data-dir", str(self.args.data_dir / "s3")),
            netns=self.network.layout.region_netns if self.network else None)
        self.s3_endpoint = f"http://{s3_host}:{s3_port}"
        # The voters start together: none is ready before a quorum of them elected a leader.
        brokers = asyncio.gather(*(self._start_broker(node)
                                   for node in range(self.args.brokers)))
        try:
            endpoint = await self.s3.expect(s3_url)
        except BaseException:
            brokers.cancel()
            await asyncio.gather(brokers, return_exceptions=True)
            raise
        self.s3.relay_stdout()
        print(f"s3: pid={self.s3.process.pid} endpoint={endpoint}", flush=True)
        addresses = await brokers
        await self._wait_until_usable(addresses[0])
        bootstrap = ",".join(addresses)
        if self.secure is not None:
            path = self.secure.write_client_properties(self.args.data_dir, bootstrap)
            print(f"client properties: {path}", flush=True)
        print("bootstrap: " + bootstrap, flush=True)

    async def _start_network(self) -> None:
        """One namespace per AZ, the relay between them; their names and addresses in
        DATA_DIR/network.json for `kipper cluster partition`."""
        brokers = {node: self._rack(node) for node in range(self.args.brokers)}
        self.args.data_dir.mkdir(parents=True, exist_ok=True)
        self.network = az_network.AzNetwork.create(
            list(dict.fromkeys(brokers.values())), brokers, self.args.az_rtt_ms,
            self.args.data_dir.resolve())
        layout = self.network.layout
        self.relay = await Child.spawn("az-relay", self.network.relay_command(),
                                       netns=layout.fabric_netns)
        await self.relay.expect(az_relay.relaying)
        self.relay.relay_stdout()
        self.network.layout = layout = dataclasses.replace(layout,
                                                           relay_pid=self.relay.process.pid)
        layout.save(self.args.data_dir / "network.json")
        if self.secure is not None:
            # The brokers' certificates must name their addresses in the AZs (reissued when
            # the subnet differs from the last run's).
            self.secure = SecureCluster.create(
                self.args.data_dir, self.secure.protocol, self.args.brokers,
                tuple(layout.broker_address(node) for node in layout.brokers))
        print(f"relay: pid={self.relay.process.pid} inter-az-rtt-ms="
              f"{layout.inter_az_rtt_ms:g} region={layout.region_netns} "
              f"state={self.args.data_dir / 'network.json'}", flush=True)
        for az in layout.azs:
            print(f"az {az}: netns={layout.netns(az)} clients={layout.client_address(az)}",
                  flush=True)

    def _rack(self, node: int) -> str:
        return self.args.racks[node % len(self.args.racks)]

    def _host(self, node: int) -> str:
        """Broker ``node``'s address: loopback, or with --netns its address in its AZ."""
        return self.network.layout.broker_address(node) if self.network else HOST

    @property
    def voters(self) -> str:
        """Brokers 0..2 are the controller quorum's voters (combined mode, as KRaft's)."""
        return ",".join(f"{node}@{self._host(node)}:{self.ports[node]}"
                        for node in range(min(self.args.brokers, QUORUM_VOTERS)))

    def _node_client(self) -> NodeClient:
        """A connection to the brokers as the cluster's own (their secret, their TLS)."""
        from .readiness import cluster_client
        return cluster_client(self.broker_env["KIPPER_CLUSTER_SECRET"],
                              self.secure.node_security() if self.secure is not None else None)

    async def _wait_until_usable(self, bootstrap: str) -> None:
        """Brokers listen before every partition has a leader that can answer (a restart
        with thousands of partitions): wait, asking as a client would."""
        from .readiness import wait_until_usable
        nodes = self._node_client()
        try:
            await wait_until_usable(nodes, split_host_port(bootstrap), READY_TIMEOUT_S)
        except TimeoutError as e:
            raise ClusterError(f"the cluster is {e}") from None
        finally:
            await nodes.close()

    async def _start_broker(self, node: int) -> str:
        """Start broker `node`, wait until it listens, print its line; return its address."""
        rack = self._rack(node)
        address = f"{self._host(node)}:{self.ports[node]}"
        env = self.broker_env
        listener = ["--listener", address]
        if self.secure is not None:
            env = {**env, **self.secure.node_env(node)}
            listener = ["--listeners", f"{self.secure.protocol}://{address}"]
        arguments = [
            "--log-level", self.args.log_level, "broker", "--node-id", str(node),
            "--rack", rack, *listener,
            "--data-dir", str(self.args.data_dir / f"broker-{node}"),
            "--s3-endpoint", self.s3_endpoint, "--controller-quorum-voters", self.voters,
            "--s3-access-key", S3_ACCESS_KEY, "--s3-secret-key", S3_SECRET_KEY,
            "--s3-latency-profile", self.args.s3_latency_profile,
        ]
        if self.args.capture_trace is not None:
            arguments += ["--capture-trace", str(self.args.capture_trace / f"broker-{node}")]
        metrics = self.args.metrics_base_port is not None
        if metrics:
            # Base 0: the broker binds any free port itself and prints it. A port picked here
            # would be free only until released, and another process may take it meanwhile.
            base = self.args.metrics_base_port
            arguments += ["--metrics-listener", f"{self._host(node)}:{base + node if base else 0}"]
        child = self.brokers[node] = await Child.spawn(
            f"broker-{node}", _python("broker.cli", *arguments), env,
            netns=self.network.layout.netns(rack) if self.network else None)
        address = await child.expect(_broker_address)
        summary = f"broker {node}: pid={child.process.pid} rack={rack} address={address}"
        if metrics:
            summary += f" metrics={await child.expect(metrics_url)}"
        child.relay_stdout()
        print(summary, flush=True)
        return address

    async def watch(self) -> None:
        """Until the S3 server (or the --netns relay) exits: a broker that dies is reported
        (which, and how) and the others keep running; ``kipper cluster start-broker N``
        starts it again."""
        waits: dict[asyncio.Task, Child] = {}
        while True:
            watched = {id(child) for child in waits.values()}
            for child in [self.s3, *([self.relay] if self.relay else []), *self.brokers.values()]:
                if id(child) not in watched and child.process.returncode is None:
                    waits[asyncio.create_task(child.process.wait())] = child
            done, _ = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                child = waits.pop(task)
                if child is self.s3 or child is self.relay:
                    raise ClusterError(f"{child.name} exited with status "
                                       f"{child.process.returncode}")
                node = next(n for n, c in self.brokers.items() if c is child)
                log.error("%s died (%s); the others keep running. Start it again with: "
                          "kipper cluster start-broker %d --data-dir %s", child.name,
                          _how_it_ended(child.process.returncode), node, self.args.data_dir)

    async def restart_broker(self, node: int) -> str:
        """Start broker ``node`` again (it died, or was never started); its new line."""
        if not 0 <= node < self.args.brokers:
            raise ClusterError(f"no broker {node} in this cluster (0..{self.args.brokers - 1})")
        child = self.brokers.get(node)
        if child is not None and child.process.returncode is None:
            raise ClusterError(f"broker {node} is running (pid {child.process.pid})")
        address = await self._start_broker(node)
        return f"broker {node}: pid={self.brokers[node].process.pid} address={address}"

    async def stop(self) -> None:
        """Brokers before the voters they report to; of the voters, the active controller
        last: the others' controlled shutdowns commit while every voter is up, and its own,
        begun once theirs are committed, has no broker left to move leaderships to, so it
        needs no quorum. S3 and the relay last, then the AZ namespaces."""
        voters = range(min(self.args.brokers, QUORUM_VOTERS))
        await asyncio.gather(*(child.stop() for node, child in self.brokers.items()
                               if node not in voters))
        active = self._active_controller(voters)
        others = [node for node in voters if node != active and node in self.brokers]
        stopping = asyncio.ensure_future(asyncio.gather(*(self.brokers[node].stop()
                                                          for node in others)))
        if active in self.brokers:
            await self._until_handed_over(active, others, stopping)
            await self.brokers[active].stop()
        await stopping
        for child in (self.s3, self.relay):
            if child is not None:
                await child.stop()
        if self.network is not None:
            self.network.remove()

    async def _until_handed_over(self, active: int, others: list[int],
                                 stopping: asyncio.Future) -> None:
        """Until the active controller's broker no longer reports ``others`` live (their
        controlled shutdowns are committed; they go on closing their logs) or they have
        exited."""
        from .readiness import live_brokers
        address = (self._host(active), self.ports[active])
        nodes = self._node_client()
        try:
            while not stopping.done():
                with contextlib.suppress(ConnectionError, OSError, asyncio.TimeoutError):
                    if not set(others) & await live_brokers(nodes, address, HANDOVER_POLL_S * 10):
                        return
                await asyncio.wait({stopping}, timeout=HANDOVER_POLL_S)
        finally:
            await nodes.close()

    def _active_controller(self, voters: range) -> int:
        """The voter that leads the newest epoch any voter has recorded in its quorum state
        (-1: none known)."""
        states = []
        for node in voters:
            path = self.args.data_dir / f"broker-{node}" / QUORUM_STATE_FILE
            with contextlib.suppress(OSError, ValueError, TypeError):
                states.append(QuorumStateFile(path).read())
        newest = max(states, key=lambda state: state.epoch, default=None)
        return newest.leader_id if newest is not None else -1


def _how_it_ended(status: int) -> str:
    if status < 0:
        return f"killed by {signal.Signals(-status).name}"
    return f"exited with status {status}"


def _stop_with(launcher: int, netns: str | None = None) -> Callable[[], None]:
    """Run in each child before it starts: the kernel sends it SIGTERM when the launcher
    dies, so a kill -9 of the launcher does not leave nodes holding the ports (Linux); with
    --netns it enters its AZ's (or the region's, the relay's) namespace."""
    def set_parent_death_signal() -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != launcher:  # it died before the line above
            os.kill(os.getpid(), signal.SIGTERM)
        if netns is not None:
            az_network.enter(netns)
    return set_parent_death_signal


class ControlSocket:
    """``DATA_DIR/cluster.sock``: where ``kipper cluster start-broker N`` asks the running
    launcher to start broker N again (one line asked, one line answered)."""

    def __init__(self, data_dir: Path, cluster: Cluster) -> None:
        self.path = data_dir / CONTROL_SOCKET
        self.cluster = cluster
        self.server: asyncio.base_events.Server | None = None

    async def __aenter__(self) -> "ControlSocket":
        self.path.unlink(missing_ok=True)
        self.server = await asyncio.start_unix_server(self._serve, str(self.path))
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.server.close()
        self.path.unlink(missing_ok=True)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            words = (await reader.readline()).decode(errors="replace").split()
            if len(words) == 2 and words[0] == "start-broker" and words[1].isdigit():
                answer = "ok " + await self.cluster.restart_broker(int(words[1]))
            else:
                answer = "error: expected 'start-broker N'"
        except ClusterError as e:
            answer = f"error: {e}"
        writer.write(answer.encode() + b"\n")
        await writer.drain()
        writer.close()


async def _start_broker_command(args: argparse.Namespace) -> int:
    """``kipper cluster start-broker N``: ask the launcher running on DATA_DIR."""
    path = args.data_dir / CONTROL_SOCKET
    try:
        reader, writer = await asyncio.open_unix_connection(str(path))
    except OSError as e:
        print(f"no `kipper cluster up` is running on {args.data_dir} ({e})", file=sys.stderr)
        return 1
    writer.write(f"start-broker {args.node}\n".encode())
    await writer.drain()
    answer = (await reader.readline()).decode().strip()
    writer.close()
    print(answer.removeprefix("ok "), file=sys.stdout if answer.startswith("ok ") else sys.stderr)
    return 0 if answer.startswith("ok ") else 1


def _python(module: str, *arguments: str) -> list[str]:
    return [sys.executable, "-m", module, *arguments]


def _port(base: int, node: int) -> int:
    """Consecutive ports from base; base 0: a free one, picked now (voters are named by
    address before they start, and a restarted broker keeps its address)."""
    if base:
        return base + node
    with socket.socket() as probe:
        probe.bind((HOST, 0))
        return probe.getsockname()[1]


async def _up(args: argparse.Namespace) -> int:
    if args.netns:
        try:
            az_network.require_root()
        except az_network.NetnsError as error:
            log.error("%s", error)
            return 2
    cluster = Cluster(args)
    stop_requested = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop_requested.set)

    async def run() -> None:
        await cluster.start()
        async with ControlSocket(args.data_dir, cluster):
            await cluster.watch()

    running = asyncio.create_task(run())
    stopping = asyncio.create_task(stop_requested.wait())
    await asyncio.wait({running, stopping}, return_when=asyncio.FIRST_COMPLETED)
    stopping.cancel()
    status = 0
    if running.done():
        log.error("%s; stopping the cluster", running.exception())
        status = 1
    else:
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)
        log.info("stopping the cluster")
    await cluster.stop()
    return status


def _positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number")
    return int(text)


def _racks(text: str) -> list[str]:
    racks = [rack.strip() for rack in text.split(",") if rack.strip()]
    if not racks:
        raise argparse.ArgumentTypeError("name at least one rack")
    return racks


def _run_up(args: argparse.Namespace) -> NoReturn:
    # Every node has exited (and the AZ namespaces are gone) once _up returns.
    exit_without_teardown(uvloop.run(_up(args)))


def add_subcommands(subparsers: argparse._SubParsersAction) -> None:
    cluster = subparsers.add_parser("cluster", help="run a local multi-broker cluster")
    commands = cluster.add_subparsers(dest="cluster_command", required=True)
    up = commands.add_parser(
        "up", help="start N brokers (one per AZ) and the embedded S3 server until Ctrl-C",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    up.add_argument("--brokers", type=_positive, default=3, help="number of brokers (default 3)")
    up.add_argument("--racks", type=_racks, default="az1,az2,az3",
                    help="comma-separated AZs, assigned to brokers in turn (default az1,az2,az3)")
    up.add_argument("--base-port", type=int, default=9092,
                    help="broker N listens on base+N (0: any free ports; default 9092)")
    up.add_argument("--metrics-base-port", type=int,
                    help="broker N serves /metrics on base+N (0: any free ports; default: off)")
    up.add_argument("--data-dir", type=Path, default=Path("data/cluster"),
                    help="brokers keep their logs in DATA_DIR/broker-N (default data/cluster)")
    up.add_argument("--s3-latency-profile", choices=sorted(LATENCY_PROFILES), default="none",
                    help="delay the brokers add to every object-store request (default none)")
    up.add_argument("--capture-trace", type=Path, metavar="DIR",
                    help="brokers write the produce traffic they receive as bench traces in "
                         "DIR/broker-N")
    up.add_argument("--security", choices=sorted(SECURITY_PROTOCOLS), default="none",
                    help="sasl-ssl: SASL_SSL listeners, SCRAM-SHA-512 user admin; ssl: mutual "
                         "TLS; both write DATA_DIR/client.properties (default none)")
    up.add_argument("--netns", action="store_true",
                    help="each AZ a network namespace, the inter-AZ path through a relay "
                         "(root only; docs/cluster.md)")
    up.add_argument("--az-rtt-ms", type=float, default=0.0,
                    help="with --netns: round-trip time the relay adds between AZs, half each "
                         "way (default 0)")
    up.set_defaults(func=_run_up)
    az_network_cli.add_partition_command(commands)
    start_broker = commands.add_parser(
        "start-broker", help="start broker N of a running `kipper cluster up` again")
    start_broker.add_argument("node", type=int, help="the broker's id")
    start_broker.add_argument("--data-dir", type=Path, default=Path("data/cluster"),
                              help="the data dir the cluster was started with")
    start_broker.set_defaults(func=lambda args: asyncio.run(_start_broker_command(args)))


def _broker_address(line: str) -> str | None:
    listening = node_listening(line)
    return None if listening is None else listening.address
