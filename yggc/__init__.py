"""yggc: latency-optimal tree speculative decoding on a static-graph runtime (after Yggdrasil)."""
__version__ = "0.1.0"
