"""`yggc compile`: its flags; main checks them, then hands a CompileJob to the compile pipeline (yggc.passes)."""
from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from ..artifacts.device import resolve_device
from ..bundle.manifest import OptLevel
from ..errors import YggcError
from ..runtime import loading
from .arg_types import Verbs
from .flags import POSITIVE, add_model_args, add_tree_args
from .run import tp_world, tree_shape

if TYPE_CHECKING:
    from ..passes.calibrate import CalibrationSpec


def _interrupt(signum, frame):
    from ..passes.write_bundle import request_stop

    request_stop()  # the writer then never commits, even if the interrupt below is dropped
    raise KeyboardInterrupt  # so the bundle writer deletes its partial directory on `kill` too


def _log(msg: str) -> None:
    from ..passes.write_bundle import stop_requested

    if stop_requested():  # a dropped interrupt: stop at the next step rather than compile on
        raise KeyboardInterrupt
    print(msg, file=sys.stderr)


# CPU: O2's frozen C++ GEMMs keep small-W steps at the memory floor and rows batch-invariant. CUDA: O1 (buckets
# captured as CUDA graphs per width); O2 there is not measured yet.
DEFAULT_OPT = {"cpu": OptLevel.O2, "cuda": OptLevel.O1}
# --calib without --temp: the sampled plan is priced where OpenAI clients and yggc serve sample unless told
SAMPLED_TEMPERATURE = 1.0


def add_parser(sub: Verbs) -> None:
    """`yggc compile`: its flags; main runs it."""
    p = sub.add_parser(
        "compile", help="compile a drafter/verifier pair into a graph bundle",
        description="Lower drafter and verifier into fixed-width AOTInductor buckets, profile every bucket "
                    "and host stage, choose the tree shape (D, W, V) by the latency objective from calibration "
                    "text (--calib; the demo pair brings its own) or take it from the flags, and write a "
                    "self-contained bundle (atomically).")
    add_model_args(p)
    add_tree_args(p)
    p.add_argument("--calib", nargs="+", metavar="FILE",
                   help="calibration text files: decode them to measure acceptance and let the latency "
                        "objective choose --depth/--width/--verify (flags given too stay fixed)")
    p.add_argument("--calib-prompts", type=POSITIVE, default=16,
                   help="windows of the calibration text decoded per candidate width (default 16)")
    p.add_argument("--calib-tokens", type=POSITIVE, default=64,
                   help="greedy tokens decoded after each calibration window (default 64)")
    p.add_argument("--temp", type=float,
                   help="with --calib: also decode the text by sampling at this temperature and keep a second "
                        "plan, which requests at T > 0 use (default 1, what OpenAI clients and yggc serve "
                        "sample at unless told; 0: greedy only, sampled requests then draft the greedy plan's "
                        "tree)")
    p.add_argument("--weights", choices=["q8_0", "q4_0", "q4_1", "bfloat16", "float32"],
                   help="the verifier's linear layers: ggml block formats streamed by yggc's CPU kernel (O2 on a "
                        "cpu; a GGUF's matrices stored so are kept as they are, others quantized), or float as "
                        "--dtype. Default: a .gguf's own formats (on a cpu at O2), else --dtype")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"], help="target device (default cpu)")
    p.add_argument("--tp", type=POSITIVE, default=1,
                   help="split the verifier over this many local processes (tensor parallel): each compiles its "
                        "slice, collectives inside the graph; the bundle then runs on exactly as many ranks "
                        "(fixed --depth/--width, --opt O1; torchrun --nproc-per-node N -m yggc compile ... too)")
    p.add_argument("--opt", choices=[o.value for o in OptLevel],
                   help="O2 (default on cpu): one package per model serving every width, weights frozen in and "
                        "packed for Inductor's C++ GEMMs, batch-invariant rows, eager tree phases around it. "
                        "O1 (default on cuda): a weightless package per width plus fused draft/verify phases")
    p.add_argument("--backend", default="inductor", choices=["inductor", "tensorrt"],
                   help="forward-bucket compiler: inductor (default; CPU and CUDA) or tensorrt (CUDA only, "
                        "needs `pip install 'yggc[tensorrt]'`)")
    p.add_argument("-o", "--output", required=True, help="bundle directory to write")
    p.add_argument("--overwrite", action="store_true", help="replace an existing bundle at -o")
    p.set_defaults(main=main)


def main(args: argparse.Namespace) -> int:
    """Compile the pair the flags name into the bundle at -o -> the exit code."""
    from ..passes.pipeline import CompileJob, compile_bundle  # the runtime itself never imports passes
    from ..runtime.tp_processes import launched_world

    signal.signal(signal.SIGTERM, _interrupt)
    check_target(args)  # before anything slow
    verifier_dir, drafter_dir = compile_pair(args)
    calib = calibration_spec(args)
    world = tp_degree(args, calib, drafter_dir)
    if world > launched_world():  # --tp N without torchrun: start the N ranks here, each compiles its slice
        from .ranks import launch_ranks

        return launch_ranks(world, main, args)
    opt = args.opt or (OptLevel.O1 if world > 1 else DEFAULT_OPT[args.device])
    job = CompileJob(Path(verifier_dir), Path(drafter_dir), Path(args.output),
                     None if calib else tree_shape(args), loading.parse_dtype(args.dtype),
                     loading.context_length(verifier_dir, args.max_seq), args.device, args.overwrite,
                     opt=opt, calib=calib, backend=args.backend, tp=world,
                     weights=weight_format(args, OptLevel(opt) == OptLevel.O2 and args.device == "cpu" and world == 1))
    warn_if_busy()
    compile_bundle(job, log=_log)
    return 0


def weight_format(args: argparse.Namespace, streams_blocks: bool) -> str:
    """--weights as the CompileJob takes it: "" (float, as --dtype), a block format, or "file" (a GGUF's own
    formats, the default where the target streams blocks: a cpu at O2, one process)."""
    if args.weights is None:
        gguf = args.model is not None and Path(args.model).suffix.lower() == ".gguf"
        return "file" if gguf and streams_blocks else ""
    if args.weights in ("bfloat16", "float32"):
        if args.weights != args.dtype:
            raise YggcError(f"--weights {args.weights} needs --dtype {args.weights} (float weights are the model's "
                            f"dtype); pass both, or a block format such as --weights q8_0")
        return ""
    if not streams_blocks:
        raise YggcError(f"--weights {args.weights} streams blocks through yggc's CPU kernel, which O2 packages call; "
                        f"compile with --device cpu --opt O2 in one process, or use --weights {args.dtype}")
    return args.weights


def tp_degree(args: argparse.Namespace, calib, drafter_dir: Path) -> int:
    """--tp (or torchrun's world size), and what a tensor-parallel compile cannot do yet, each in one line."""
    from ..passes.drafter_lowering import lowering_of_folder
    from ..runtime.drafters import kind_of_folder

    world = tp_world(args)
    if world == 1:
        return 1
    if calib is not None:
        raise YggcError("a tensor-parallel compile takes a fixed tree (calibration under --tp is not built); "
                        "pass --depth and --width instead of --calib")
    if args.opt == OptLevel.O2 or args.backend != "inductor":
        raise YggcError("tensor-parallel bundles are built at --opt O1 with the inductor backend; drop --opt O2 / "
                        "--backend tensorrt")
    if not lowering_of_folder(drafter_dir).tensor_parallel:
        raise YggcError("tensor-parallel bundles need a standalone drafter; "
                        f"{kind_of_folder(drafter_dir).description} is not supported yet")
    return world


def check_target(args: argparse.Namespace) -> None:
    """The device exists and the backend can build for it."""
    if args.backend == "tensorrt" and args.device != "cuda":
        raise YggcError("--backend tensorrt builds TensorRT engines for NVIDIA GPUs; add --device cuda "
                        "or use --backend inductor")
    if args.backend == "tensorrt" and args.opt == OptLevel.O2:
        raise YggcError("--backend tensorrt lowers one engine per width; use it with --opt O1 (the cuda default)")
    resolve_device(args.device)
    if args.backend == "tensorrt":
        from ..artifacts.tensorrt_buckets import require_tensorrt

        require_tensorrt()


def compile_pair(args: argparse.Namespace) -> tuple[Path, Path]:
    """-m/-md, or the embedded demo pair (with its own calibration text unless a shape is given)."""
    if args.model is None and args.model_draft is None:
        if not args.calib and not (args.depth or args.width or args.verify):
            args.calib = [str(loading.DEMO_CALIB)]
        return loading.demo_pair_dirs()
    if args.model is None or args.model_draft is None:
        raise YggcError("compile needs both -m VERIFIER and -md DRAFTER (or neither, for the demo pair)")
    return loading.model_dir(args.model), loading.model_dir(args.model_draft)


def warn_if_busy() -> None:
    import torch

    from ..artifacts.cpu_use import busy_warning

    warning = busy_warning(torch.get_num_threads())
    if warning:
        print(f"yggc compile: warning: {warning}; the profile, and the tree shape chosen from it, may be off",
              file=sys.stderr)


def calibration_spec(args: argparse.Namespace) -> CalibrationSpec | None:
    """--calib and the tree flags given with it -> the search the calibrate and choose-shape passes run."""
    from ..passes.calibrate import CalibrationSpec, read_calibration_text

    if args.temp is not None and args.temp < 0:
        raise YggcError(f"--temp must be >= 0, got {args.temp:g}")
    if not args.calib:
        if args.temp:
            raise YggcError("--temp prices the tree for sampling from calibration text; give --calib FILES too")
        return None
    temperature = SAMPLED_TEMPERATURE if args.temp is None else args.temp
    files = tuple(Path(f) for f in args.calib)
    read_calibration_text(files)  # a bad file fails here, before anything slow
    if args.depth == 0 or args.width == 0:
        raise YggcError("--depth and --width must be >= 1")
    default = CalibrationSpec(files)
    spec = CalibrationSpec(files, args.calib_prompts, default.prompt_tokens, args.calib_tokens,
                           max_depth=args.depth or default.max_depth,
                           widths=(args.width,) if args.width else default.widths,
                           pin_depth=args.depth, pin_verify=args.verify, temperature=temperature)
    if spec.new_tokens <= spec.max_depth:
        raise YggcError(f"--calib-tokens must exceed the deepest calibrated tree ({spec.max_depth}), got "
                        f"{spec.new_tokens}")
    if args.verify is not None and not 1 <= args.verify <= spec.max_depth * max(spec.widths):
        raise YggcError(f"--verify must be in 1..depth*width = {spec.max_depth * max(spec.widths)}, got {args.verify}")
    return spec
