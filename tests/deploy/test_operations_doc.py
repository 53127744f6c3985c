"""docs/operations.md documents every setting, and names only settings that exist."""

from __future__ import annotations

import re

from models.settings import LockstepSettings

from . import settings_doc
from .files import OPERATIONS, lockstep_names_in, setting_variables


def test_the_settings_table_matches_the_model() -> None:
    block = settings_doc.current_block(OPERATIONS.read_text())
    assert block is not None, "the settings-table markers are missing from docs/operations.md"
    assert block == settings_doc.table(), "out of date: run `python -m tests.deploy.settings_doc --write`"


def test_every_field_is_in_the_table_with_a_meaning() -> None:
    rows = {row[0].strip("`"): row for row in settings_doc.rows()}
    assert set(rows) == setting_variables()
    undocumented = [var for var, (_, _, _, meaning) in rows.items() if not re.sub(r"\(.*\)", "", meaning).strip()]
    assert not undocumented, (f"give these fields a description in models/settings.py (or a note in "
                              f"tests/deploy/settings_doc.py NOTES): {undocumented}")
    block = settings_doc.current_block(OPERATIONS.read_text()) or ""
    for var in setting_variables():
        assert f"| `{var}` |" in block, var


def test_a_missing_row_would_fail() -> None:
    """The comparison is real: the doc with one row dropped no longer matches the model's table."""
    text = OPERATIONS.read_text()
    row = next(line for line in text.splitlines() if line.startswith("| `LOCKSTEP_PARTITIONS` |"))
    assert settings_doc.current_block(text.replace(row + "\n", "")) != settings_doc.table()


def test_the_doc_names_no_setting_that_does_not_exist() -> None:
    fields = setting_variables()
    text = OPERATIONS.read_text()
    # LOCKSTEP_SECRET_<NAME>[_FILE] is the one documented family of dynamic variables (lockstep deliver).
    named = {v for v in lockstep_names_in(text) if not v.startswith("LOCKSTEP_SECRET_")}
    # Abbreviations in prose such as `LOCKSTEP_KAFKA_SSL_CAFILE`, `_CERTFILE` are complete names here.
    assert named <= fields, sorted(named - fields)
    assert "LOCKSTEP_SECRET_<NAME>" in text


def test_env_names_follow_the_settings_prefix() -> None:
    assert LockstepSettings.model_config.get("env_prefix") == "LOCKSTEP_"
    assert settings_doc.env_name("kafka_bootstrap_servers") == "LOCKSTEP_KAFKA_BOOTSTRAP_SERVERS"
