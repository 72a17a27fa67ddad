"""The proposer registry (yggc/runtime/drafters/__init__.py), and the worked example of docs/architecture.md
("Adding a proposer"): a proposer written against the Proposer interface alone (yggc/runtime/draft.py) decodes
through the one loop exactly as the verifier alone, greedy and at T > 0, with no change to the loop."""
from __future__ import annotations

import torch
from test_speculative import N_SAMPLES, chi2_pvalue, decode, exact_two, first_two_after_root

from yggc.artifacts.cache_layout import prefill
from yggc.artifacts.timing import NoTrace
from yggc.plan.shape import TreeShape
from yggc.runtime import drafters
from yggc.runtime.autoregressive import PREFILL_CHUNK, AutoregressiveDecoder
from yggc.runtime.draft import Draft, DraftRequest
from yggc.runtime.speculative import SpeculativeDecoder
from yggc.runtime.verify_phase import GreedyVerifyPhase
from yggc.tree.sampling import SamplingParams
from yggc.tree.token_tree import TokenTree


def test_every_drafter_kind_drafts_with_a_registered_proposer():
    """A manifest's drafter kind names the proposer it decodes with; suffix and fuzzy drafting are registered too."""
    for kind in drafters.KINDS:
        assert drafters.PROPOSERS[kind.name] is kind.proposer
    assert {"suffix", "fuzzy", "suffix-branches"} <= set(drafters.PROPOSERS)
    for name, proposer in drafters.PROPOSERS.items():
        assert proposer.name == name and proposer.description


class LookupProposer:
    """Prompt lookup: the tokens that followed the root's last earlier occurrence in the text, as one chain."""

    name = "lookup"
    description = "the text after the root's last earlier occurrence"
    verify_phase_kind = GreedyVerifyPhase  # no drafter: nothing to hand over after a verification
    extra_nodes = 0
    drafter = None
    trace = NoTrace()  # nothing to time

    def __init__(self, verifier, layout, shape: TreeShape):
        self.verifier, self.layout, self.shape, self.text = verifier, layout, shape, []

    def set_shape(self, shape: TreeShape) -> None:
        self.shape = shape

    def reusable(self, prompt_ids: list[int]) -> int:
        return len(prompt_ids)  # no cache of its own

    def prefill(self, prompt_ids: list[int], start: int) -> torch.Tensor:
        self.text = list(prompt_ids)
        return prefill(self.verifier, prompt_ids[start:], start, self.layout, PREFILL_CHUNK)

    def propose(self, request: DraftRequest) -> Draft:
        missing = request.n + 1 - len(self.text)  # the committed text, the root last
        if missing > 0:
            self.text += request.pending[-missing:]
        root, D = self.text[-1], self.shape.depth
        at = max((i for i, t in enumerate(self.text[:-1]) if t == root), default=None)
        chain = [] if at is None else self.text[at + 1: at + 1 + D]
        tree = TokenTree.from_root(root, 1 + D)
        for d, token in enumerate(chain, 1):
            tree.tokens[d], tree.parents[d], tree.depth[d], tree.cum_logp[d] = token, d - 1, d, -d
        tree.n_nodes = 1 + len(chain)
        return Draft(tree, None, 0, tree.ancestor_mask(), point_mass=True)

    def accept(self, new, last_id, draft, moves, rows) -> list[int]:
        self.text += new
        return new[-1:]


def test_a_new_proposer_decodes_as_the_verifier_alone(tiny_pair):
    verifier, _, layout = tiny_pair
    prompt = [1, 5, 2, 3, 1, 5, 2]
    dec = SpeculativeDecoder(LookupProposer(verifier, layout, TreeShape(4, 1, 4)))
    assert decode(dec, prompt, n=20) == decode(AutoregressiveDecoder(verifier, layout), prompt, n=20)
    assert dec.stats.n_accept > 0  # the lookups were right some of the time


def test_a_new_proposer_samples_the_verifier_distribution(tiny_pair):
    verifier, _, layout = tiny_pair
    params, prompt, root = SamplingParams(temperature=1.0), [3, 4, 3, 4, 3], 4
    dec = SpeculativeDecoder(LookupProposer(verifier, layout, TreeShape(3, 1, 3)))

    def reset():
        dec.proposer.text = list(prompt)

    counts = first_two_after_root(dec, prompt, root, params, N_SAMPLES, reset)
    p_value = chi2_pvalue(counts, exact_two(verifier, layout, prompt + [root], params))
    assert p_value > 1e-3, f"emitted tokens do not follow the verifier (p={p_value:.2g})"
