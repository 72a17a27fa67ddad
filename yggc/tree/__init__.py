"""Draft trees as plain tensors: TokenTree, Equal-Growth Tree growth, pruning, acceptance rules
(greedy, tree sampling, block verification), sampling and suffix matching.

Pure tensor code with no model calls: imports torch, yggc.errors and yggc.compat only, so every algorithm here is
tested against a brute-force reference without a model.
"""
