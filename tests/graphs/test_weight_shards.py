"""graphs.checkpoint.write_weights: one file up to the cap, Hugging Face's sharded layout above it; either reads back
through read_hf_tensors unchanged."""
import json

import pytest
import torch
from safetensors import safe_open
from yggc.graphs.checkpoint import INDEX_FILE, WEIGHTS_FILE, read_hf_tensors, shard_groups, write_weights


def test_shard_groups_keep_order_and_cap():
    sizes = {"a": 4, "b": 4, "c": 9, "d": 1, "e": 3}
    assert shard_groups(sizes, 8) == [["a", "b"], ["c"], ["d", "e"]]  # c alone: larger than the cap
    assert shard_groups(sizes, 100) == [["a", "b", "c", "d", "e"]]


@pytest.mark.parametrize("cap, files", [(10_000, 1), (1_000, 3)])  # 3: w0 w1 | w2 w3 | big
def test_weights_round_trip_in_files_under_the_cap(tmp_path, cap, files):
    g = torch.Generator().manual_seed(0)
    tensors = {f"w{i}": torch.randn(10, 20, generator=g).to(torch.bfloat16) for i in range(4)}  # 400 bytes each
    tensors["big"] = torch.randn(30, 20, generator=g)  # 2,400 bytes: over the small cap, alone in its shard
    written = write_weights(tensors, tmp_path, cap, metadata={"format": "pt"})
    assert len(written) == files and sorted(tmp_path.glob("*.safetensors")) == sorted(written)
    for path in written:
        with safe_open(str(path), framework="pt") as st:
            names = list(st.keys())
        assert len(names) == 1 or sum(tensors[n].numel() * tensors[n].element_size() for n in names) <= cap
    if files == 1:
        assert written == [tmp_path / WEIGHTS_FILE] and not (tmp_path / INDEX_FILE).exists()
    else:
        index = json.loads((tmp_path / INDEX_FILE).read_text())
        assert set(index["weight_map"]) == set(tensors) and index["metadata"]["total_size"] == 4 * 400 + 2400
        assert [p.name for p in written] == [f"model-0000{i}-of-0000{files}.safetensors" for i in range(1, files + 1)]
    back = read_hf_tensors(tmp_path)
    assert back.keys() == tensors.keys() and all(torch.equal(back[k], tensors[k]) for k in tensors)
