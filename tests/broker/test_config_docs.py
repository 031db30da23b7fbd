"""The settings tables of README.md and docs/ are what broker/config_docs.py generates from the
definitions (BrokerConfig, TOPIC_CONFIGS, the API version ranges): a definition changed without
regenerating fails."""

from __future__ import annotations

import pytest

from broker.config import settings
from broker.config_docs import REPO, WRITE_COMMAND, render, stale_files
from storage.config import TOPIC_CONFIGS


def test_committed_tables_are_the_generated_ones():
    stale = [str(path.relative_to(REPO)) for path in stale_files()]
    assert not stale, f"settings tables out of date in {', '.join(stale)}: run `{WRITE_COMMAND}`"


def test_readme_documents_every_setting_and_topic_config():
    readme = (REPO / "README.md").read_text()
    assert "<!-- generated: broker-settings -->" in readme
    assert "<!-- generated: topic-configs -->" in readme
    assert "<!-- generated: kafka-apis -->" in readme
    for name in [s.name for s in settings()] + list(TOPIC_CONFIGS):
        assert f"| `{name}` |" in readme, name


def test_every_definition_has_a_description():
    assert all(s.doc for s in settings())
    assert all(d.doc for d in TOPIC_CONFIGS.values())


def test_a_block_keeps_only_the_named_prefixes():
    text = render("<!-- generated: broker-settings diskless_ -->\nstale row\n<!-- end generated -->\n")
    rows = [line for line in text.splitlines() if line.startswith("| `")]
    assert rows and all(row.startswith("| `diskless_") for row in rows)
    assert "stale row" not in text


def test_an_unknown_block_is_an_error():
    with pytest.raises(ValueError, match="unknown generated block"):
        render("<!-- generated: broker-flags -->\n<!-- end generated -->\n")
