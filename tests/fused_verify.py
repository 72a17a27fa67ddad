"""The greedy verify phase's paths in tests: choosing between the kernel library's tree ops and the Python host
rules, and which path a bundle's verify phase took."""
from yggc.passes.kernels import kernel_library

from yggc.artifacts import kernel_ops

PATHS = ("ops", "host")


def use_tree_path(monkeypatch, path: str) -> None:
    """"ops": the kernel library's tree ops (built and loaded into the process); "host": the Python rules, as in a
    process without the library (whether an earlier test loaded it or not)."""
    if path == "ops":
        kernel_library.build()
    else:
        monkeypatch.setattr(kernel_ops, "has_tree_ops", lambda: False)


def fused_verify_calls(rt) -> list[bool]:
    """Record whether each greedy verify phase ran in the verifier package runner's one call (verify_tree)."""
    model, calls = rt.compiled["verifier"], []
    fused = model.verify_tree

    def counted(*args):
        out = fused(*args)
        calls.append(out is not None)
        return out

    model.verify_tree = counted
    return calls
