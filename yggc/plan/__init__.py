"""Planning a decode: the tree shape, calibration statistics, the cost model and the latency objective
(yggdrasil.txt, 4.1) - later the depth predictor and the stage DAG.

Pure functions over numbers and trees: imports yggc.tree and yggc.errors, never a model or a decoder.
"""
