"""bench.produce_pipeline_bench pipelines one-partition Produce requests to a real local
cluster and reports the brokers' CPU a request."""

from bench import produce_pipeline_bench


def test_reports_the_cost_of_a_request_at_each_partition_count(capsys):
    assert produce_pipeline_bench.main([
        "--brokers", "1", "--partitions", "2,20", "--requests", "200", "--records", "2",
        "--rounds", "1"]) == 0
    out = capsys.readouterr().out
    assert "errors none" in out
    assert "20 partitions:" in out and "x the 2-partition cost" in out
