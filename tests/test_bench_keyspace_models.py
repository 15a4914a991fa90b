"""bench/keyspace_models.py at a tiny size, in a subprocess: it builds its synthetic warehouse
with the real dbt models, finds every model that reads per-key rows, measures each and the
plain scan, and the top-N marts equal their sort-based definitions on keys full of ties. No
time or ratio is asserted: at this size they are the fixed costs of a query, not the keys'."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PER_KEY_MODELS = {"keyspace_top_keys", "keyspace_types", "keyspace_prefixes", "keyspace_scan_costs"}


def test_tiny_keyspace_models_bench(tmp_path):
    out = tmp_path / "keyspace_models.json"
    proc = subprocess.run(
        [sys.executable, str(REPO / "bench" / "keyspace_models.py"), "--rows", "3000",
         "--keys-per-scan", "300", "--top-keys", "5", "--repeat", "1",
         "--root", str(tmp_path), "--json", str(out)],
        capture_output=True, text=True, timeout=600, cwd=REPO,
    )  # fmt: skip
    assert proc.returncode == 0, f"bench failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    record = json.loads(out.read_text())
    figures = record["figures"]
    assert set(figures) >= {"scan"} | PER_KEY_MODELS, sorted(figures)
    for name, fig in figures.items():
        assert fig["cpu_s"] >= 0 and fig["peak_rss_bytes"] > 0, (name, fig)
        assert fig["ratio_to_scan"] is not None, name
        if name != "scan":
            assert isinstance(fig["within_target"], bool), name
            assert fig["result_rows"] > 0, name
    assert record["target_ratio"] == 3.0
    # Ties broken by key name: the aggregates give exactly the rows of the old window sorts.
    assert all(check["equal"] for check in record["reference"].values()), record["reference"]
    assert "| keyspace_top_keys |" in proc.stdout
    assert not list(tmp_path.glob("keyspace-models-*")), "the work folder is left behind"
