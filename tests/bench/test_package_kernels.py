"""tools/bench_package_kernels.py: profiler event names map to what the kernels compute, and on a lowered tiny
verifier every kernel lands in a named group (each linear layer's GEMM, the attention op, the tied head)."""
from __future__ import annotations

import bench_package_kernels as tool
import pytest
from yggc.graphs import load_config

# SmolLM2-135M's sizes: hidden 576, 9 heads and 3 KV heads of 64, intermediate 1536
SMOLLM2 = {(960, 576): "qkv projection", (576, 576): "attention output projection",
           (3072, 576): "gate + up projection", (576, 1536): "down projection"}


def test_kernel_groups_from_event_names():
    assert tool.kernel_group("graph_0_gemm_ms21n3072k576_cpp_fused__to_copy_add_mean_mm_6", SMOLLM2) == \
        "GEMM gate + up projection"
    assert tool.kernel_group("graph_0_gemm_ms21n960k576_cpp_fused_index_view_1", SMOLLM2) == "GEMM qkv projection"
    assert tool.kernel_group("graph_0_gemm_ms21n100k7_cpp_fused_mm_3", SMOLLM2) == "GEMM N=100 K=7"
    assert tool.kernel_group("yggc::attend_rows_v2", SMOLLM2) == "attention op"
    assert tool.kernel_group("yggc::tied_head_v2", SMOLLM2) == "tied LM head"
    assert tool.kernel_group("graph_0_cpp_fused_mul_silu_split_7", SMOLLM2) == "pointwise and norm kernels"
    assert tool.kernel_group("aten::empty", SMOLLM2) == "other: aten::empty"
    events = {"yggc::attend_rows_v2": 1.5, "graph_0_cpp_fused_a_1": 0.25, "graph_0_cpp_fused_b_2": 0.5}
    assert tool.group_ms(events, SMOLLM2) == {"attention op": 1.5, "pointwise and norm kernels": 0.75}


@pytest.mark.slow
def test_every_kernel_of_a_lowered_verifier_is_grouped(checkpoint, capsys):
    path = checkpoint("llama_tied_llama3")  # tied: the head is the tied-head op in bf16
    assert set(tool.linear_names(load_config(path)).values()) == set(SMOLLM2.values())  # four distinct shapes
    tool.main(["-m", str(path), "--widths", "1,4", "--context", "16", "--max-seq", "128", "--repeats", "3",
               "--rounds", "2", "--calls", "2"])
    rows = [line.split(" | ")[0].lstrip("| ") for line in capsys.readouterr().out.splitlines() if line.startswith("| ")]
    groups = set(rows[1:]) - {"all profiled", "wall, unprofiled (median)"}
    assert {"attention op", "tied LM head", "pointwise and norm kernels",
            *(f"GEMM {name}" for name in SMOLLM2.values())} <= groups
    assert all(g.startswith("other: aten::") for g in groups if g.startswith("other"))  # no compiled kernel left over
