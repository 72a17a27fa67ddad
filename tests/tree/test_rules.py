"""The sampling rules' names are StrEnums: equal to, hashed like and written to JSON as their strings."""
import json

import pytest

from yggc.errors import YggcError
from yggc.runtime.speculative import SAMPLED_TREE_RULES
from yggc.tree.rules import ChainRule, TreeRule, sampling_rules


def test_members_are_their_strings():
    assert [str(r) for r in ChainRule] == ["block", "token"]
    assert [str(r) for r in TreeRule] == ["rrs", "traversal", "point-mass"]
    assert json.dumps({"rule": TreeRule.POINT_MASS}) == '{"rule": "point-mass"}' and ChainRule("block") == "block"
    assert SAMPLED_TREE_RULES["rrs"] is SAMPLED_TREE_RULES[TreeRule.RRS]  # a plain string finds a member's entry
    assert {r for r in TreeRule if r.sampled} == set(SAMPLED_TREE_RULES)


def test_rule_names_parse_or_fail_in_one_line():
    assert sampling_rules("token", "traversal") == (ChainRule.TOKEN, TreeRule.TRAVERSAL)
    with pytest.raises(YggcError, match="tree 'beam'.: chains take block or token, trees rrs, traversal or point-mass"):
        sampling_rules(ChainRule.BLOCK, "beam")
