"""bench.security_bench end to end at a tiny size: plaintext, mutual-TLS and SASL_SSL
clusters each produce and consume in both storage modes, and the ratios are printed."""

from __future__ import annotations

import json

from bench.security_bench import SECURITY, main


def test_every_security_and_mode_is_measured(tmp_path, capsys):
    out = tmp_path / "figures.json"
    assert main(["--mb", "0.2", "--partitions", "2", "--json", str(out)]) == 0
    figures = json.loads(out.read_text())
    assert set(figures) == set(SECURITY)
    for by_mode in figures.values():
        assert set(by_mode) == {"classic", "diskless"}
        assert all(value > 0 for phases in by_mode.values() for value in phases.values())
    assert "sasl-ssl diskless produce" in " ".join(capsys.readouterr().out.split())
