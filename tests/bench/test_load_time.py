"""`yggc inspect BUNDLE --load-time`: the bundle's size against its weights, the load and first-token times and the
RSS marks, on a bundle without compiled packages (its weights are the checkpoints' safetensors)."""
import json

from yggc.cli.main import main


def test_load_time_reports_size_times_and_rss(capsys, eager_bundle):
    assert main(["inspect", str(eager_bundle), "--load-time", "--json", "--threads", "1"]) == 0
    r = json.loads(capsys.readouterr().out)
    on_disk = sum(p.stat().st_size for p in eager_bundle.rglob("*") if p.is_file())
    safetensors = sum(p.stat().st_size for p in eager_bundle.rglob("*.safetensors"))
    assert r["bundle_mb"] == round(on_disk / 1e6, 1) and r["packages_mb"] == {}
    assert abs(r["weights_mb"] * 1e6 - safetensors) < 0.05 * safetensors  # both models' weights, stored once each
    assert r["bundle_over_weights"] >= 1.0 and r["threads"] == 1 and r["decoded_steps"] >= 1
    assert 0 < r["load_s"] <= r["load_to_first_token_s"] and r["import_s"] > 0
    assert r["peak_rss_mb"] >= max(r["rss_imported_mb"], r["rss_loaded_mb"], r["rss_end_mb"]) > 0


def test_load_time_text_names_each_measure(capsys, eager_bundle):
    assert main(["inspect", str(eager_bundle), "--load-time"]) == 0
    out = capsys.readouterr().out
    for words in ("x the weights", "packages: none", "Runtime.load:", "to the first token:", "MB peak"):
        assert words in out
