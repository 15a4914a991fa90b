"""A run's private Prefect server in a folder without a database starts from a copy of an empty
database migrated once per Prefect version (yardstick/app/prefect_server.py, seed_database),
not from Prefect's migrations each time; a folder's own database is never replaced."""

from __future__ import annotations

import json
from pathlib import Path
from urllib.request import urlopen

from yardstick.app import prefect_server


def test_a_new_folder_starts_from_the_migrated_template_and_serves(tmp_path):
    home = tmp_path / "prefect"
    home.mkdir()
    assert prefect_server.seed_database(home)
    template = prefect_server.database_template()
    assert (home / "prefect.db").read_bytes() == template.read_bytes()
    assert not list(home.glob(".prefect.db.*"))  # no partial copy left beside it
    server = prefect_server.PrivatePrefectServer(home).spawn().wait()
    try:
        # A migrated database: the API answers a query that reads its tables.
        with urlopen(f"{server.api_url}/flows/count", data=b"{}", timeout=10) as response:
            assert json.loads(response.read()) == 0
    finally:
        server.stop()


def test_a_folder_with_a_database_or_another_database_is_left_alone(tmp_path, monkeypatch):
    home = tmp_path / "prefect"
    home.mkdir()
    (home / "prefect.db").write_bytes(b"the folder's own")
    assert not prefect_server.seed_database(home)
    assert (home / "prefect.db").read_bytes() == b"the folder's own"
    other = tmp_path / "other"
    other.mkdir()
    monkeypatch.setenv("PREFECT_API_DATABASE_CONNECTION_URL", "postgresql+asyncpg://db/prefect")
    assert not prefect_server.seed_database(other)
    assert list(Path(other).iterdir()) == []
