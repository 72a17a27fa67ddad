"""tools/bench_kernel_sources.py: the hot ops' registrations become switches between two builds of yggc's kernels,
a registration it cannot find is one line, and with the switch on OLD the package's calls run OLD's build."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import bench_kernel_sources as tool
import pytest

from yggc.artifacts import kernel_ops

KERNELS = Path(kernel_ops.__file__).with_name("kernels")
TOOL = Path(__file__).resolve().parents[2] / "tools" / "bench_kernel_sources.py"


def test_the_hot_ops_register_as_switches():
    source = tool.switched_register_ops((KERNELS / tool.REGISTER).read_text())
    for op, (registration, switch) in tool.SWITCHED.items():
        assert registration not in source and source.count(switch) == 1
    assert source.index("void yggc_use_old") > source.index("}  // namespace yggc")


def test_a_registration_it_cannot_find_is_one_line():
    source = (KERNELS / tool.REGISTER).read_text().replace("&yggc::attend_rows);", "&yggc::attend_rows_v9);")
    with pytest.raises(SystemExit, match="no longer registers attend_rows_v3"):
        tool.switched_register_ops(source)


@pytest.mark.slow
def test_the_switch_on_old_runs_olds_build(checkpoint, tmp_path):
    """OLD: today's sources with a 5 ms sleep in the attention op (same bits). With 2 layers a call, OLD's calls
    take about 10 ms longer: the switch routes the package's calls to OLD's build."""
    old = tmp_path / "old"
    shutil.copytree(KERNELS, old)
    attend = old / "attend_rows.cpp"
    source = attend.read_text()
    call = "  return attend(q, keys, values, mask, 3);"
    assert call in source
    attend.write_text("#include <chrono>\n#include <thread>\n" + source.replace(
        call, "  std::this_thread::sleep_for(std::chrono::milliseconds(5));\n" + call))
    done = subprocess.run([sys.executable, str(TOOL), str(old), str(KERNELS), "-m", str(checkpoint("llama_gqa")),
                           "--widths", "1,2", "--context", "16", "--max-seq", "128", "--repeats", "3",
                           "--threads", "1"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert "logits equal at every width" in lines[0] and lines[1] == "| build | W=1 | W=2 |"
    rows = {line.split(" | ")[0].lstrip("| "): [float(x) for x in line.rstrip(" |").split(" | ")[1:]]
            for line in lines[3:]}
    assert all(o - n >= 8 for o, n in zip(rows["OLD"], rows["NEW"]))
    assert all(d <= -8 for d in rows["NEW - OLD, median of pairs"])
