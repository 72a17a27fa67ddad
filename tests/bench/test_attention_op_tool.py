"""tools/bench_attention_op.py: tree masks as the runtime builds them, one library in two processes computes the same
bits (the tool's equality check), bad widths one line."""
import pytest
import torch
from bench_attention_op import main, tree_mask
from yggc.passes.kernels import kernel_library


def test_tree_rows_see_the_context_themselves_and_their_ancestors():
    mask = tree_mask(5, 3, 16)  # rows 0..4 at slots 3..7; parents: 1, 2 -> 0; 3, 4 -> 1
    assert mask[:, :3].all() and not mask[:, 8:].any()
    assert [mask[w, 3:8].nonzero().flatten().tolist() for w in range(5)] == [[0], [0, 1], [0, 2], [0, 1, 3], [0, 1, 4]]


def test_one_library_in_two_processes_gives_equal_outputs(capsys):
    library = str(kernel_library.build())
    assert main(["time", library, library, "--widths", "1,3", "--context", "40", "--calls", "2", "--rounds", "1",
                 "--threads", str(torch.get_num_threads())]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "outputs equal between the libraries" in out[0]
    assert [line.split(" | ")[0] for line in out[3:]] == [f"| {library}"] * 2


def test_bad_widths_are_refused_in_one_line(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["time", "x.so", "--widths", "0,4"])
    assert exit_.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "bench_attention_op time: error: argument --widths: widths must be >= 1, got 0,4")
