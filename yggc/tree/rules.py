"""The names of the acceptance rules a sampled (T > 0) iteration verifies with, as `yggc run --chain-rule/--tree-rule`
and `Runtime.decoder` take them.

Chains (W = 1): block verification (block-verification.txt, Algorithm 2: the whole block at once) or token
verification (Leviathan et al.), both in block_verification.py. Trees (W > 1): recursive rejection sampling over a
tree grown from drafter samples (Jeon et al. 2024, recursive_rejection.py), traversal verification (Weng et al.
2025, traversal.py), or the point-mass rule over the greedy-grown tree (verification.py's `verify_tree_sampling`,
whose acceptance is only p(x)).

StrEnum: a member equals its plain string, hashes like it and is written to JSON as it, so flags and records
that hold the strings keep working.
"""
from __future__ import annotations

from ..compat import StrEnum
from ..errors import YggcError


class ChainRule(StrEnum):
    BLOCK = "block"  # block verification (yggc/tree/block_verification.py: verify_chain_block)
    TOKEN = "token"  # token by token (Leviathan et al.; verify_chain_tokenwise)


class TreeRule(StrEnum):
    RRS = "rrs"  # recursive rejection sampling over a sampled tree (recursive_rejection.py)
    TRAVERSAL = "traversal"  # traversal verification over a sampled tree (traversal.py)
    POINT_MASS = "point-mass"  # the greedy-grown tree, each child a point mass (verification.py)

    @property
    def sampled(self) -> bool:
        """Whether the tree is grown from drafter samples (rrs, traversal) rather than greedily."""
        return self is not TreeRule.POINT_MASS


def sampling_rules(chain_rule: str, tree_rule: str) -> tuple[ChainRule, TreeRule]:
    """The rule names as given (plain strings or members) -> the members; one YggcError line for an unknown one."""
    try:
        return ChainRule(chain_rule), TreeRule(tree_rule)
    except ValueError:
        *trees, last = TreeRule
        raise YggcError(f"unknown sampling rule (chain {str(chain_rule)!r}, tree {str(tree_rule)!r}): chains take "
                        f"{' or '.join(ChainRule)}, trees {', '.join(trees)} or {last}") from None
