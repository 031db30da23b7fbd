"""bench.coordinator_apply_bench applies diskless commits in-process and reports."""

from bench import coordinator_apply_bench


def test_reports_the_cost_of_a_commit(capsys):
    assert coordinator_apply_bench.main(["--batches", "50", "--rounds", "3"]) == 0
    assert "commit of 50 batches: first (new logs)" in capsys.readouterr().out
