"""Planning a decode: the tree shape, calibration statistics, the cost model and the latency objective
(yggdrasil.txt, 4.1), the draft-depth predictor (4.1-4.2), one iteration as a stage DAG with its
list schedule (5), and the plan a bundle records of them (plan.json as frozen values: bundle_plan).

Pure functions over numbers and trees: imports yggc.tree, yggc.errors and yggc.compat, never a model or a decoder.
"""
