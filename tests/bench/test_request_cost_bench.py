"""bench.request_cost_bench runs the Produce and Fetch handlers in-process and reports."""

from bench import request_cost_bench


def test_reports_produce_and_fetch_costs(capsys):
    assert request_cost_bench.main(["--partitions", "5", "--runs", "20"]) == 0
    out = capsys.readouterr().out
    assert "produce, 1 partition x 2 records:" in out
    assert "fetch of every partition, nothing new:" in out
