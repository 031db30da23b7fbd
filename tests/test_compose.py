"""docker-compose.yml and the Dockerfile, checked without Docker: every kipper command must be
one the real CLI parser accepts, and every address in the file must point at a service."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml

from broker.cli import build_parser
from broker.config import split_host_port

ROOT = Path(__file__).resolve().parents[1]
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
SERVICES = COMPOSE["services"]
DOCKERFILE = (ROOT / "Dockerfile").read_text()
_VARIABLE = re.compile(r"\$\{(\w+):-([^}]*)\}")


def interpolate(value: str, environ: dict[str, str]) -> str:
    """Compose's ${VAR:-default}, the only form the file uses."""
    return _VARIABLE.sub(lambda m: environ.get(m.group(1)) or m.group(2), value)


def kipper_commands(environ: dict[str, str]) -> dict[str, object]:
    """The parsed command of every service running the kipper image."""
    parsed = {}
    for name, service in SERVICES.items():
        if service.get("build", {}).get("target") == "kipper":
            argv = [interpolate(str(arg), environ) for arg in service["command"]]
            try:
                parsed[name] = build_parser().parse_args(argv)
            except SystemExit:
                pytest.fail(f"{name}: `kipper {' '.join(argv)}` is rejected by the CLI")
    return parsed


def container_ports(service: dict) -> set[int]:
    return {int(mapping.split(":")[-1]) for mapping in service.get("ports", [])}


def test_three_brokers_in_three_azs_are_the_controller_quorum():
    brokers = kipper_commands({})
    assert sorted(brokers) == ["broker0", "broker1", "broker2"]
    assert all(args.command == "broker" for args in brokers.values())
    assert sorted(args.node_id for args in brokers.values()) == [0, 1, 2]
    assert sorted(args.rack for args in brokers.values()) == ["az1", "az2", "az3"]
    # Every broker names the same voters: each broker by its node id at its advertised listener.
    expected_voters = ",".join(f"{args.node_id}@{args.advertised_listener}"
                               for _, args in sorted(brokers.items()))
    for name, args in brokers.items():
        assert args.controller is None
        assert args.controller_quorum_voters == expected_voters
        host, port = split_host_port(args.advertised_listener)
        assert host == name
        assert split_host_port(args.listener) == ("0.0.0.0", port)
        _, metrics_port = split_host_port(args.metrics_listener)
        assert container_ports(SERVICES[name]) == {port, metrics_port}
        assert str(args.data_dir) in {v.split(":")[1] for v in SERVICES[name]["volumes"]}


@pytest.mark.parametrize("environ, store", [
    ({}, "minio"),
    ({"S3_ENDPOINT": "http://localstack:4566"}, "localstack"),
])
def test_object_store_endpoints_are_services_of_the_file(environ, store):
    for name, args in kipper_commands(environ).items():
        endpoint = urlsplit(args.s3_endpoint)
        assert endpoint.hostname == store, name
        assert endpoint.port in container_ports(SERVICES[store])
    assert "profiles" not in SERVICES["minio"]  # MinIO is the default
    assert SERVICES["localstack"]["profiles"] == ["localstack"]


def test_brokers_use_the_credentials_minio_is_started_with():
    minio = SERVICES["minio"]["environment"]
    for name in kipper_commands({}):
        environment = SERVICES[name]["environment"]
        assert environment["AWS_ACCESS_KEY_ID"] == minio["MINIO_ROOT_USER"]
        assert environment["AWS_SECRET_ACCESS_KEY"] == minio["MINIO_ROOT_PASSWORD"]


def test_brokers_share_a_cluster_secret_the_user_must_set():
    """Broker-only requests need the secret (broker/inter_broker.py): every broker gets the
    same one, and the file has no default for it (a published default would let anyone in)."""
    secrets = {SERVICES[name]["environment"]["KIPPER_CLUSTER_SECRET"]
               for name in kipper_commands({})}
    assert len(secrets) == 1
    assert re.fullmatch(r"\$\{KIPPER_CLUSTER_SECRET:\?[^}]+\}", secrets.pop())


def test_spark_worker_joins_the_master_service():
    worker_command = SERVICES["spark-worker"]["command"]
    master = urlsplit(next(arg for arg in worker_command if arg.startswith("spark://")))
    assert master.hostname == "spark-master"
    master_command = SERVICES["spark-master"]["command"]
    assert master_command[master_command.index("--port") + 1] == str(master.port)
    assert master.port in container_ports(SERVICES["spark-master"])


def test_dockerfile_builds_every_target_and_runs_kipper():
    stages = set(re.findall(r"^FROM \S+ AS (\S+)$", DOCKERFILE, re.MULTILINE))
    targets = {s["build"]["target"] for s in SERVICES.values() if "build" in s}
    assert targets <= stages
    assert 'ENTRYPOINT ["kipper"]' in DOCKERFILE
    # Every package the distribution ships is copied into the image.
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    included = pyproject["tool"]["setuptools"]["packages"]["find"]["include"]
    packages = {pattern.rstrip("*") for pattern in included}
    assert packages <= set(re.findall(r"^COPY (\w+) \1$", DOCKERFILE, re.MULTILINE))


def test_brokers_get_time_to_close_their_logs_when_stopped():
    """compose's default 10 s before SIGKILL cuts the clean close of many logs short."""
    for name in kipper_commands({}):
        grace = SERVICES[name]["stop_grace_period"]
        assert grace.endswith("s") and int(grace[:-1]) >= 60, name
