"""Compile side of artifacts/constants_map.py: a package compiled with its constants out of its library, and
the constants Inductor compiled it against written beside it, each ALIGN-aligned in the file.

Inductor serialises a package's constants from its graph lowering (`AotCodeCompiler.compile(graph, ...)`); with
`aot_inductor.package_constants_in_so` off it writes none of them, and the ones freezing made (packed GEMM
weights) have no name a caller could look them up by. `captured()` records them, by the internal names the
package binds, as that call receives them. Such a package crashes the process if called unbound: load it with
artifacts.aoti_package.load_package, which binds the file beside it.
"""
from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch
from safetensors.torch import save_file
from torch._inductor.codecache import AotCodeCompiler
from torch.export import ExportedProgram

from ..artifacts.constants_map import ALIGN, LAYOUT_KEY, constants_path


@contextmanager
def captured() -> Iterator[dict[str, torch.Tensor]]:
    """Inside the block, each package compile leaves {internal name: tensor} of its constants in the yielded dict
    (cleared per compile: one package per block)."""
    found: dict[str, torch.Tensor] = {}
    compile_fn = AotCodeCompiler.__dict__["compile"]

    def compile_and_capture(cls, graph, *args, **kwargs):
        found.clear()
        found.update((name, graph.get_original_value_of_constant(name)) for name in graph.constants
                     if name not in graph.folded_constants)
        return compile_fn.__func__(cls, graph, *args, **kwargs)

    AotCodeCompiler.compile = classmethod(compile_and_capture)
    try:
        yield found
    finally:
        AotCodeCompiler.compile = compile_fn


def storable(t: torch.Tensor) -> bool:
    """Whether t's bytes are its values: a CPU tensor, not a oneDNN-packed one (an opaque layout)."""
    return t.device.type == "cpu" and not t.is_mkldnn


def _storage_bytes(t: torch.Tensor) -> torch.Tensor:
    """[n] uint8: t's whole storage, padded with zeros to a multiple of ALIGN bytes."""
    if not storable(t):
        raise ValueError(f"a {t.device.type} {'mkldnn ' if t.is_mkldnn else ''}constant cannot be stored beside "
                         "its package")
    raw = torch.empty(0, dtype=torch.uint8).set_(t.untyped_storage())
    return torch.cat([raw, raw.new_zeros(-raw.numel() % ALIGN)])


def _header_size(path: Path) -> int:
    with open(path, "rb") as f:
        return int.from_bytes(f.read(8), "little")


def _stored_once(constants: dict[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """-> ({stored name: storage bytes} holding each distinct storage once, {constant name: its stored name}).
    Inductor packs a weight once per GEMM that reads it (an unrolled draft phase's steps each get their own copy):
    those copies are stored, mapped and cached once."""
    stored: dict[str, torch.Tensor] = {}
    by_digest: dict[tuple[int, str], str] = {}
    storage_of: dict[str, str] = {}
    for name, t in constants.items():
        raw = _storage_bytes(t)
        key = (raw.numel(), hashlib.sha256(raw.numpy().data).hexdigest())
        same = by_digest.get(key)
        if same is not None and torch.equal(stored[same], raw):
            storage_of[name] = same
        else:
            stored[name], storage_of[name] = raw, name
            by_digest.setdefault(key, name)
    return stored, storage_of


def write_constants(package: Path, constants: dict[str, torch.Tensor]) -> Path:
    """Write `constants` to constants_path(package), each distinct storage once (_stored_once). Every stored tensor
    is uint8 of a multiple of ALIGN bytes, so they all start aligned once the data does; the data starts after the
    8-byte length and the JSON header, which the writer pads with spaces to 8 bytes, so a second write pads the
    metadata to move it onto ALIGN."""
    stored, storage_of = _stored_once(constants)
    layout = {name: {"dtype": str(t.dtype), "shape": list(t.shape), "stride": list(t.stride()),
                     "offset": t.storage_offset(), "nbytes": t.untyped_storage().nbytes(), "storage": storage_of[name]}
              for name, t in constants.items()}
    path = constants_path(package)
    metadata = {LAYOUT_KEY: json.dumps(layout), "pad": ""}
    save_file(stored, str(path), metadata=metadata)
    header = _header_size(path)
    metadata["pad"] = " " * (-(8 + header) % ALIGN)
    save_file(stored, str(path), metadata=metadata)
    if (8 + _header_size(path)) % ALIGN:
        os.remove(path)
        raise RuntimeError(f"{path.name}: the constants could not be aligned to {ALIGN} bytes")
    return path


def compile_beside(program: ExportedProgram, out_path: Path, config: dict) -> bool:
    """aoti_compile_and_package(program) under `config`, with the constants written beside the package -> True.
    Where Inductor chose oneDNN kernels whose packed weights are opaque tensors (an ATen GEMM on float32), it
    compiles again with them inside the library -> False."""
    with captured() as constants:
        torch._inductor.aoti_compile_and_package(program, package_path=str(out_path),
                                                 inductor_configs={**config, "aot_inductor.package_constants_in_so": False})
    if not constants:
        raise RuntimeError(f"{out_path.name}: Inductor handed over no constants to write beside the package")
    if not all(map(storable, constants.values())):
        torch._inductor.aoti_compile_and_package(program, package_path=str(out_path), inductor_configs=config)
        return False
    write_constants(out_path, constants)
    return True
