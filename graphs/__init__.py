"""Static-shape model graphs and Hugging Face checkpoint loading (installed as `yggc.graphs`).

Imports nothing of yggc: the runtime and the compile passes build on it, not the reverse.
"""
from .checkpoint import check_pair, load_config, load_model, load_tokenizer
from .config import CheckpointError, ModelConfig
from .llama import LlamaGraph

__all__ = ["CheckpointError", "LlamaGraph", "ModelConfig", "check_pair", "load_config", "load_model", "load_tokenizer"]
