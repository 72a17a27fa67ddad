"""Which path a bundle's greedy verify phase took."""


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
