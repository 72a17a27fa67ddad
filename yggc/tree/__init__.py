"""Draft trees as plain tensors: TokenTree, Equal-Growth Tree growth, pruning, acceptance rules
(greedy, tree sampling, block verification) and sampling.

Pure tensor code with no model calls: imports torch and yggc.errors only, so every algorithm here is
tested against a brute-force reference without a model.
"""
