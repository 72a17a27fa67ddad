"""`yggc bench`: yggc's decoders side by side with transformers, one process, rows interleaved.

suite (what to run) <- rows (samples, statistics) <- runners, floor, report <- harness (the loop).
May import the runtime, tree, plan and bundle; the runtime never imports it.
"""
