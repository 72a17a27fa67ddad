"""What `yggc bench` runs: the rows, their order, the tuning grids and the workload (BenchConfig)."""
from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from ..errors import YggcError
from ..plan.shape import TreeShape
from ..runtime.loading import DEMO_PAIR

# table order = set-up order: eager rows first, so the compiled rows' RSS increments show only the bundle
ROWS = ("hf-ar", "hf-assisted", "openvino", "openvino-spec", "llama.cpp", "llama.cpp-gguf", "yggc-ar-eager", "yggc-chain", "yggc-tree-static",
        "yggc-ar-compiled", "yggc-suffix", "yggc-full", "yggc-full-suffix")
HF_ROWS = frozenset({"hf-ar", "hf-assisted"})
OPENVINO_ROWS = frozenset({"openvino", "openvino-spec"})  # the optional extra yggc[openvino]: only when named in --rows
LLAMA_CPP_ROWS = frozenset({"llama.cpp", "llama.cpp-gguf"})  # the optional extra yggc[llama-cpp]: only when named
DEFAULT_ROWS = tuple(r for r in ROWS if r not in OPENVINO_ROWS | LLAMA_CPP_ROWS)
DRAFTER_ROWS = frozenset({"hf-assisted", "openvino-spec", "yggc-chain", "yggc-tree-static", "yggc-full",
                          "yggc-full-suffix"})
BUNDLE_ROWS = frozenset({"yggc-ar-compiled", "yggc-suffix", "yggc-full", "yggc-full-suffix"})
CHAIN_DEPTHS = (2, 3, 4, 6, 8)
TREE_GRID = (TreeShape(3, 2, 6), TreeShape(4, 2, 8), TreeShape(4, 3, 8), TreeShape(5, 2, 10),
             TreeShape(4, 4, 12), TreeShape(6, 3, 12))
PROMPTS_FILE = DEMO_PAIR / "prompts.json"
BENCH_PAIR = Path("~/.cache/yggc/pairs/bench").expanduser()
BUNDLE_CACHE = Path("~/.cache/yggc/bundles").expanduser()
RANDOM_PROMPT_LEN = 32
TUNE_TOKENS = 64
ASSISTANT_TOKENS = 5  # openvino-spec: draft tokens per verify step (OpenVINO's num_assistant_tokens)


def log(msg: str) -> None:
    print(f"yggc bench: {msg}", file=sys.stderr, flush=True)


@dataclass
class BenchConfig:
    verifier: Path
    drafter: Path | None
    bundle: Path | None = None  # None: compile one into BUNDLE_CACHE (or, with quick, use a cached one)
    rows: tuple[str, ...] = ROWS
    n_prompts: int = 4
    n_new: int = 128
    repeats: int = 3
    temperature: float = 0.0
    dtype: str = "float32"
    max_seq: int = 1024
    quick: bool = False
    prompts_file: Path | None = None
    chain_depths: tuple[int, ...] = CHAIN_DEPTHS
    tree_grid: tuple[TreeShape, ...] = TREE_GRID
    bundle_cache: Path = BUNDLE_CACHE
    openvino_ir: Path | None = None  # None: export the verifier into openvino_cache (see yggc.bench.openvino_ir)
    openvino_draft_ir: Path | None = None
    assistant_tokens: int = ASSISTANT_TOKENS
    optimum_cli: Path | None = None  # None: $YGGC_OPTIMUM_CLI, else optimum-cli on PATH or beside this Python
    gguf: Path | None = None  # the llama.cpp-gguf row's file (--gguf, or -m MODEL.gguf)
    bandwidth_mb: int = 256
    floor_repeats: int = 20
    json_path: Path | None = None
    plot_path: Path | None = None

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    @property
    def openvino_cache(self) -> Path:
        """Exported OpenVINO IRs, beside the bundle cache (~/.cache/yggc/openvino)."""
        return self.bundle_cache.parent / "openvino"

    @property
    def llama_cpp_cache(self) -> Path:
        """The llama.cpp row's GGUF exports, beside the bundle cache (~/.cache/yggc/llama.cpp)."""
        return self.bundle_cache.parent / "llama.cpp"


def parse_shape(text: str) -> TreeShape:
    """'4x2x8' (DxWxV) -> TreeShape."""
    try:
        depth, width, verify = (int(x) for x in text.lower().split("x"))
    except ValueError:
        raise YggcError(f"tree shapes are written DxWxV like 4x2x8, got {text!r}") from None
    return TreeShape.from_args(depth, width, verify)
