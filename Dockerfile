# Images for docker-compose.yml.
#   kipper (default target): the `kipper` command; a container runs `kipper <subcommand> ...`
#   spark: Spark master/worker with the Kafka client the harness's replay tasks produce with

FROM apache/spark:3.5.1-python3 AS spark
USER root
RUN pip3 install --no-cache-dir confluent-kafka pyarrow
USER spark

FROM python:3.11-slim AS kipper
WORKDIR /opt/kipper
COPY pyproject.toml README.md ./
COPY broker broker
COPY protocol protocol
COPY storage storage
COPY replication replication
COPY coordinator coordinator
COPY bench bench
RUN pip install --no-cache-dir .
VOLUME /var/lib/kipper
ENTRYPOINT ["kipper"]
CMD ["--help"]
