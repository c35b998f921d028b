"""The sensitivity command on the embedded model (short: one task, one sample, few answer tokens)."""
import json

import pytest


@pytest.mark.embedded
def test_sensitivity_ranks_30_layers(tmp_path):
    from evalsuite.cli.sensitivity_cmd import sensitivity

    rc = sensitivity.main(["--variant", "w4g128", "--tasks", "reasoning", "--limit", "1", "--max-new-tokens", "8",
                           "--out", str(tmp_path)], standalone_mode=False)
    assert rc == 0
    data = json.loads((tmp_path / "results.json").read_text())
    units = data["units"]
    assert sorted(u["layer"] for u in units) == list(range(30)) and all(u["kld"] >= 0 for u in units)
    assert units[0]["kld"] >= units[-1]["kld"] and data["variant_kld"]["kld"] > 0
    assert (tmp_path / "sensitivity.png").stat().st_size > 1000
