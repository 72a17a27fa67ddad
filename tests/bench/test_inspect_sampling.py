"""`yggc inspect` on a bundle without a sampling plan says what requests at T > 0 decode with."""
from yggc.cli.main import main


def test_inspect_names_the_missing_sampling_plan(capsys, eager_bundle):
    assert main(["inspect", str(eager_bundle)]) == 0
    out = capsys.readouterr().out
    assert ("  sampling plan: none; requests at T > 0 draft the greedy plan's tree, unpriced at any temperature "
            "(`yggc compile --calib` prices one at T = 1)\n") in out
