"""Export a checkpoint folder to OpenVINO IR for `yggc bench --rows openvino,openvino-spec --openvino-ir OUT`.

    python tools/export_openvino.py VERIFIER_DIR OUT [--weight-format fp16|fp32] [--optimum-cli PATH]

Runs `optimum-cli export openvino --model VERIFIER_DIR --task text-generation-with-past --weight-format F OUT`
(optimum-intel). --optimum-cli names one in another virtualenv (default: $YGGC_OPTIMUM_CLI, else the one on
PATH or beside this Python). Without the flags the bench exports into its cache by itself; this tool is for
exporting ahead of time, or elsewhere. A .gguf model is imported first, as `yggc` does with -m.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from yggc.bench.openvino_ir import WEIGHT_FORMATS, export_ir
from yggc.errors import USER_ERRORS
from yggc.runtime.loading import model_dir


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="export_openvino.py", description=__doc__.splitlines()[0])
    p.add_argument("model", type=Path, metavar="VERIFIER_DIR", help="checkpoint folder (HF format) or .gguf file")
    p.add_argument("out", type=Path, metavar="OUT", help="IR folder to write")
    p.add_argument("--weight-format", choices=WEIGHT_FORMATS, default="fp16",
                   help="weights in the IR (default fp16; the bench uses fp32 for --dtype float32)")
    p.add_argument("--optimum-cli", type=Path, metavar="PATH", help="the optimum-cli executable to run")
    args = p.parse_args(argv)
    try:
        out = export_ir(model_dir(args.model, keep_blocks=False), args.out, args.weight_format, args.optimum_cli)
    except USER_ERRORS as e:
        print(f"export_openvino: error: {e}", file=sys.stderr)
        return 2
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
