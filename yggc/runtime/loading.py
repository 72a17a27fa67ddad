"""Loading the verifier (and drafter) the user names, with the checks that must come first."""
from __future__ import annotations

import itertools
import sys
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path

import torch
from tokenizers import Tokenizer

from ..artifacts.cache_layout import CacheLayout, view_align
from ..errors import YggcError
from ..graphs import LlamaGraph, load_config, load_model, load_tokenizer
from .chat import WHERE, ChatTemplate, load_chat_template

DTYPES = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16}
DEMO_PAIR = Path(__file__).parent.parent / "demo_pair"
DEMO_CALIB = DEMO_PAIR / "calib.txt"  # in-domain text (stdlib sources the demo pair was not tested on)
DEFAULT_MAX_SEQ = 2048
GGUF_CACHE = Path("~/.cache/yggc/gguf").expanduser()  # -m MODEL.gguf is imported here on first use


def parse_dtype(name: str) -> torch.dtype:
    try:
        return DTYPES[name]
    except KeyError:
        raise YggcError(f"unknown dtype {name!r}; use float32 or bfloat16") from None


def dtype_label(dtype: torch.dtype) -> str:
    return "bfloat16" if dtype == torch.bfloat16 else "float32"


def demo_pair_dirs() -> tuple[Path, Path]:
    verifier, drafter = DEMO_PAIR / "verifier", DEMO_PAIR / "drafter"
    if not (verifier / "config.json").exists():
        raise YggcError(f"the embedded demo pair is missing from {DEMO_PAIR}; pass -m VERIFIER (reinstall yggc)")
    return verifier, drafter


@dataclass
class LoadedModel:
    graph: LlamaGraph  # or an EAGLE-3 head (graphs.eagle3.Eagle3Graph) as a drafter
    tokenizer: Tokenizer | None
    layout: CacheLayout
    path: Path
    chat: ChatTemplate | None = None

    @property
    def eos_ids(self) -> tuple[int, ...]:
        """Stop tokens: the config's eos ids and the chat template's end-of-turn token."""
        ids = self.graph.cfg.eos_token_ids
        if self.chat and self.chat.eos_token and self.tokenizer is not None:
            turn_end = self.tokenizer.token_to_id(self.chat.eos_token)
            ids = ids if turn_end is None or turn_end in ids else (*ids, turn_end)
        return ids


def model_dir(path: str | Path, keep_blocks: bool = True) -> Path:
    """A checkpoint folder as given, or the folder a .gguf file is imported into (once, then cached): its Q8_0, Q4_0
    and Q4_1 matrices as their blocks unless not keep_blocks (a folder other programs read, e.g. the bench's peers);
    a warning line on stderr when the import dequantizes other quantized types."""
    p = Path(path)
    if p.suffix.lower() != ".gguf":
        return p
    from ..graphs.gguf_import import cached_import

    return cached_import(p, GGUF_CACHE, keep_blocks=keep_blocks, log=lambda line: print(f"yggc: {line}", file=sys.stderr))


def context_length(model_dir: Path, max_seq: int | None) -> int:
    limit = load_config(model_dir).max_position_embeddings
    if max_seq is None:
        return min(limit, DEFAULT_MAX_SEQ)
    if not 1 < max_seq <= limit:
        raise YggcError(f"--max-seq {max_seq} is outside 2..{limit} (the model's max_position_embeddings)")
    return max_seq


def load(model_dir: str | Path, dtype: torch.dtype, max_seq: int, device: str = "cpu",
         weights: bool = True, graph_loader=load_model) -> LoadedModel:
    """weights=False: the graph holds its KV cache only (see graphs.load_model); compiled packages bring weights.
    graph_loader(path, n_slots, dtype, device, weights) builds the graph (a tensor-parallel rank's slice, say)."""
    path = Path(model_dir)
    layout = CacheLayout(max_seq, view_align(device))
    return LoadedModel(graph_loader(path, layout.n_slots, dtype, device, weights), load_tokenizer(path), layout, path,
                       load_chat_template(path))


def device_scope(device: torch.device):
    """Where host-built tensors should be created: a torch.device context on an accelerator; none on the
    CPU, where they go anyway (the context routes every torch call through a TorchFunctionMode, a Python
    call per torch op, which adds up to a large share of a tree iteration's host time)."""
    return nullcontext() if device.type == "cpu" else torch.device(device)


def model_device(model) -> torch.device:
    """Where a graph (or a CompiledModel around one) keeps its KV cache (a weightless graph's parameters are
    on the meta device), else its parameters."""
    graph = getattr(model, "graph", model)
    return next(itertools.chain(graph.buffers(), graph.parameters())).device


def encode_prompt(tokenizer: Tokenizer | None, text: str) -> list[int]:
    if tokenizer is None:
        raise YggcError("this model directory has no tokenizer.json; pass token ids with --prompt-ids 1,2,3")
    return tokenizer.encode(text).ids


def encode_chat(model: LoadedModel, messages: list[dict[str, str]]) -> list[int]:
    """Token ids of `messages` through the model's chat template, ready for the assistant's turn."""
    if model.chat is None:
        raise YggcError(f"{model.path} has no chat template ({WHERE}); "
                        "use -p with a plain prompt")
    return encode_prompt(model.tokenizer, model.chat.render(messages))
