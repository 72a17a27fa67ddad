"""Kernel libraries of different yggc versions in one process (artifacts/kernel_ops.py): the library registers its
ops on request, each only if the process has not got it, so a bundle of this version loads beside one of an
older version (whose library registers every op as it loads, and aborts a process that holds any of them)."""
import subprocess
import sys

import pytest
from yggc.passes.kernels import kernel_library

from yggc.artifacts import kernel_ops
from yggc.errors import YggcError

# an older library: registers its two v1 ops as it loads (static registration), with stand-in kernels
OLD_LIBRARY = """
#include <torch/library.h>
at::Tensor attend(const at::Tensor& q, const at::Tensor&, const at::Tensor&, const at::Tensor&) { return q; }
at::Tensor head(const at::Tensor& x, const at::Tensor&, int64_t) { return x; }
TORCH_LIBRARY_FRAGMENT(yggc, m) {
  m.def("attend_rows_v1(Tensor q, Tensor keys, Tensor values, Tensor mask) -> Tensor");
  m.def("tied_head_v1(Tensor x, Tensor packed, int vocab) -> Tensor");
}
TORCH_LIBRARY_IMPL(yggc, CPU, m) {
  m.impl("attend_rows_v1", attend);
  m.impl("tied_head_v1", head);
}
"""

BOTH_ORDERS = """
import sys, torch
from yggc.artifacts import kernel_ops
old, new = sys.argv[1:3]
for library in (old, new) if sys.argv[3] == "old first" else (new, old):
    kernel_ops.load(library)
x = torch.ones(2, 4, dtype=torch.bfloat16)
print(kernel_ops.registered(), torch.ops.yggc.tied_head_v1(x, torch.zeros(1, 2, 16, 2, dtype=torch.bfloat16), 3).shape[1])
"""

# an older library that registers on request and exports its kernel under the C++ name this version's has too
SAME_NAMES = """
#include <torch/library.h>
namespace yggc {
at::Tensor attend_rows(const at::Tensor& q, const at::Tensor&, const at::Tensor&, const at::Tensor&) { return q; }
}
extern "C" void yggc_register_ops() {}
"""

OLD_THEN_NEW = """
import ctypes, sys, torch
from yggc.artifacts import kernel_ops
ctypes.CDLL(sys.argv[1], mode=ctypes.RTLD_GLOBAL)
kernel_ops.load(sys.argv[2])
q = torch.ones(2, 1, 32, dtype=torch.bfloat16)
values = torch.full((1, 3, 32), 2.0, dtype=torch.bfloat16)
print(getattr(torch.ops.yggc, kernel_ops.ATTEND_OP)(q, values, values, torch.ones(1, 3, dtype=torch.bool))[0, 0, 0])
"""


def built(tmp_path_factory, source: str):
    path = tmp_path_factory.mktemp("old") / "old.cpp"
    path.write_text(source)
    out = path.with_name("yggc_kernels.so")
    subprocess.run(kernel_library.compile_command((path,), out), check=True, capture_output=True)
    return out


@pytest.fixture(scope="module")
def old_library(tmp_path_factory):
    return built(tmp_path_factory, OLD_LIBRARY)


@pytest.mark.parametrize("order, v1_columns", [("old first", 4), ("new first", 3)])
def test_a_new_library_loads_beside_an_older_one_in_either_order(old_library, order, v1_columns):
    """Old first: the new library adds the ops the old one lacks (v1 stays the old stand-in, which returns x [2, 4]).
    New first: the old library is not loaded at all, and its packages' v1 calls reach the new kernels."""
    done = subprocess.run([sys.executable, "-c", BOTH_ORDERS, str(old_library), str(kernel_library.build()), order],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["True", str(v1_columns)]


def test_the_new_kernels_run_beside_an_older_library_of_the_same_function_names(tmp_path_factory):
    """An older library loaded first (RTLD_GLOBAL) exports yggc::attend_rows, a stand-in returning q (ones): the
    op this version registers must still run its own kernel, attention over values of 2."""
    older = built(tmp_path_factory, SAME_NAMES)
    done = subprocess.run([sys.executable, "-c", OLD_THEN_NEW, str(older), str(kernel_library.build())],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "tensor(2., dtype=torch.bfloat16)"


def test_an_older_library_into_a_process_with_the_ops_is_one_clear_error(tmp_path, monkeypatch):
    kernel_library.build()  # this process has the ops
    older = tmp_path / "yggc_kernels.so"
    older.write_bytes(b"\x7fELF an older build registering attend_rows_v1(Tensor q, ...) and absent_v1(Tensor x)")
    kernel_ops.load(older)  # every op this yggc calls is registered: nothing to load
    monkeypatch.setattr(kernel_ops, "registered", lambda: False)  # a process that lacks one of them
    kernel_ops.load(older)  # the process has every op the older library registers: nothing to load either
    monkeypatch.setattr(kernel_ops, "KNOWN_OPS", (*kernel_ops.KNOWN_OPS, "absent_v1"))
    with pytest.raises(YggcError, match="is an older build than the one this process loaded"):
        kernel_ops.load(older)  # it would register attend_rows_v1 a second time: that aborts a process


def test_a_damaged_library_is_one_clear_error(tmp_path, monkeypatch):
    damaged = tmp_path / "yggc_kernels.so"
    damaged.write_bytes(b"not a shared object")
    monkeypatch.setattr(kernel_ops, "registered", lambda: False)
    with pytest.raises(YggcError, match="kernel library yggc_kernels.so cannot be loaded .*re-run `yggc compile`"):
        kernel_ops.load(damaged)


def test_a_source_g_plus_plus_refuses_or_a_missing_symbol_is_one_line(tmp_path):
    """compile_and_link names the source g++ refuses, and the symbol a link cannot find."""
    broken, caller = tmp_path / "broken.cpp", tmp_path / "caller.cpp"
    broken.write_text("int f( {\n")
    caller.write_text("int missing_kernel(int);\nint call(int x) { return missing_kernel(x); }\n")
    with pytest.raises(YggcError, match=r"g\+\+ failed on broken.cpp \(.*error"):
        kernel_library.compile_and_link([(caller, tmp_path / "caller.o", []), (broken, tmp_path / "broken.o", [])],
                                        tmp_path / "lib.so")
    with pytest.raises(YggcError, match=r"linking failed \(.*undefined reference to `missing_kernel"):
        kernel_library.compile_and_link([(caller, tmp_path / "caller.o", [])], tmp_path / "lib.so")
    assert not (tmp_path / "lib.so").exists()
