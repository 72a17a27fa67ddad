"""`yggc train drafter|eagle3|prompts|pair|evaluate`: the flags, and each job's frozen options built once from them
(yggc.train.options); the jobs live in yggc.train, imported when the command runs (transformers, which builds the
models, comes with the train extra: pip install 'yggc[train]')."""
from __future__ import annotations

import argparse
import importlib
import json
import os
import shlex
import sys
from dataclasses import fields
from pathlib import Path

from ..errors import YggcError
from ..train.options import (
    DrafterOptions,
    Eagle3Options,
    EvaluateOptions,
    PairOptions,
    PromptsOptions,
    RunSettings,
    TrainOptions,
)
from ..train.presets import CACHE, DRAFTER_PRESETS, EAGLE3_PRESETS, PAIR_PRESETS
from .arg_types import Verbs, probability, whole_number

POSITIVE = whole_number(1)
Jobs = Verbs  # what add_subparsers returns: `yggc train`'s own subcommands
# job -> the summary key naming the folder the job wrote (printed on stdout); evaluate prints its table instead
WRITES = {"pair": "out", "drafter": "drafter", "eagle3": "head", "prompts": "prompts"}
MODULES = {"prompts": "magpie", "eagle3": "eagle3_head"}  # job -> its module in yggc.train where the names differ
OPTIONS = {"drafter": DrafterOptions, "eagle3": Eagle3Options, "prompts": PromptsOptions, "pair": PairOptions,
           "evaluate": EvaluateOptions}

DESCRIPTION = """Train the models yggc drafts with, on the CPU. Every job is resumable: run the same command again
to continue a stopped run. Progress goes to stderr; the trained folder's path is printed on stdout."""

EXAMPLES = """examples:
  yggc train prompts --target $(yggc pull smollm2) --count 20000 # -> ~/.cache/yggc/pairs/magpie/chat_prompts.json
  yggc train drafter --target $(yggc pull smollm2)               # -> ~/.cache/yggc/pairs/smollm2/drafter
  yggc train eagle3 --target $(yggc pull smollm2) --steps 1000   # -> ~/.cache/yggc/pairs/smollm2/eagle3-smollm2
  yggc train pair --preset demo --threads 1                      # -> ~/.cache/yggc/pairs/demo/{verifier,drafter}
  yggc train evaluate --pair ~/.cache/yggc/pairs/demo --threads 1

`yggc train JOB --help` lists a job's flags."""

DRAFTER_ABOUT = """\
Distil a small standalone drafter (a Llama with the target's tokenizer) from text the target writes
itself: chat prompts made from stdlib docstrings, the target's answers and top-k soft labels (OUT/data,
generated once), then training on them. Writes OUT/drafter with prompts.json, calib.txt and
drafter_summary.json (held-out agreement with the target)."""
DRAFTER_EXAMPLES = "example: yggc train drafter --target $(yggc pull smollm2) --prompts 512 --steps 700"

EAGLE3_ABOUT = """\
Train an EAGLE-3 head on the verifier's own answers (the drafter job's OUT/data, generated when absent)
and on reference answers it reads, by the training-time test: --unroll draft steps, each fed the head's
own output features. Writes OUT/eagle3-<preset> in the public layout with eagle3_summary.json (held-out
agreement per draft step). A run that has reached its steps only evaluates and exports."""
EAGLE3_EXAMPLES = "example: yggc train eagle3 --target $(yggc pull smollm2) --steps 1000   # the shipped head"

PROMPTS_ABOUT = """\
Sample chat prompts the target writes itself (Magpie): given only its chat template's opening of a user
turn, an instruct model writes a user request. Shards under OUT/magpie (resumable, deterministic under
--seed), then OUT/chat_prompts.json: the finished, English, deduplicated turns, split into train and a
held-out set by a hash of the text. Feed it to `yggc train drafter|eagle3 --chat-prompts`."""
PROMPTS_EXAMPLES = "example: yggc train prompts --target $(yggc pull smollm2) --count 20000 --threads 2"

PAIR_ABOUT = """\
Train a verifier + drafter Llama pair (one shared byte-level BPE tokenizer) on the Python stdlib's
sources; the drafter is distilled from the verifier. Writes OUT/verifier and OUT/drafter (config.json,
model.safetensors, tokenizer.json) and OUT/train_summary.json; resumable training state in OUT/.state/."""
PAIR_EXAMPLES = """examples:
  yggc train pair --preset demo --threads 1   # ~15 min on one core
  yggc train pair --preset bench --threads 1 --tokenizer yggc/demo_pair/verifier/tokenizer.json"""

EVALUATE_ABOUT = """\
Score a verifier/drafter pair on held-out stdlib files: each model's perplexity, the drafter's top-1
agreement with the verifier, and the mean accepted length of greedy chain drafts (k=4 and 8, counting
the bonus token). Prints a table on stdout."""

def add_job(jobs: Jobs, name: str, summary: str, description: str,
            epilog: str | None = None) -> argparse.ArgumentParser:
    """A `yggc train NAME` parser; its description and examples are shown as written."""
    return jobs.add_parser(name, help=summary, description=description, epilog=epilog,
                           formatter_class=argparse.RawDescriptionHelpFormatter)


def add_preset_args(p: argparse.ArgumentParser, presets: dict, default: str, what: str, out: str) -> None:
    """--preset NAME (checked by the job: an unknown name is one error line) and --out DIR."""
    p.add_argument("--preset", metavar="NAME", default=default,
                   help=f"{what}: {', '.join(sorted(presets))} (default {default})")
    p.add_argument("--out", type=Path, metavar="DIR", help=out)


def add_budget_args(p: argparse.ArgumentParser, threads: int | None, ckpt_every: int, minutes: str,
                    fresh: str) -> None:
    """The flags every training job has: threads, seed, time and step limits of this run, resuming, --json."""
    every_core = threads == os.cpu_count()
    p.add_argument("--threads", type=POSITIVE, default=threads, metavar="N",
                   help=f"torch threads (default {'every core' if every_core else threads}); 1 on a shared machine")
    p.add_argument("--seed", type=int, default=0, metavar="N",
                   help="seed of the initialisation and the batch order (default 0)")
    p.add_argument("--max-minutes", type=float, metavar="MIN", help=minutes)
    p.add_argument("--stop-after", type=POSITIVE, metavar="N", help="stop after N steps in this run (rerun to resume)")
    p.add_argument("--ckpt-every", type=POSITIVE, default=ckpt_every, metavar="N",
                   help=f"save the training state every N steps (default {ckpt_every})")
    p.add_argument("--no-resume", action="store_true", help=fresh)
    p.add_argument("--json", metavar="FILE", help="also write the run's summary as JSON to FILE (-: stdout)")


def add_target_arg(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument("--target", type=Path, required=True, metavar="DIR",
                   help=f"{what}: a checkpoint folder with config.json and tokenizer.json, e.g. $(yggc pull smollm2)")


def add_chat_prompts_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--chat-prompts", type=Path, metavar="FILE",
                   help="chat_prompts.json of `yggc train prompts`: its training prompts alternate with the stdlib "
                        "ones, its held-out ones are scored apart (default folder: <preset>-chat)")


def add_gen_batch_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--gen-batch", type=POSITIVE, metavar="N",
                   help="prompts the target answers at once, one shard each (default: the preset's, 32 for smollm2); "
                        "fixed per data folder. 64 makes ~1.7x the tokens per second of 32 on 2 AVX2 cores")


def add_drafter_parser(jobs: Jobs) -> None:
    p = add_job(jobs, "drafter", "distil a standalone drafter from a target's own answers", DRAFTER_ABOUT,
                DRAFTER_EXAMPLES)
    add_target_arg(p, "the model to draft for")
    add_preset_args(p, DRAFTER_PRESETS, "smollm2", "student size and budgets",
                    f"output folder (default {CACHE}/<preset>)")
    p.add_argument("--corpus-dir", type=Path, metavar="DIR",
                   help="make prompts from *.py files here instead of the stdlib")
    add_chat_prompts_arg(p)
    p.add_argument("--prompts", type=POSITIVE, metavar="N", help="training prompts to answer (default: the preset's)")
    add_gen_batch_arg(p)
    p.add_argument("--steps", type=POSITIVE, metavar="N", help="optimizer steps (default: the preset's)")
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"],
                   help="exported weights (default bfloat16)")
    add_budget_args(p, os.cpu_count(), 100, "stop training after this long (rerun to resume)",
                    "start training over (the generated data is kept)")


def add_eagle3_parser(jobs: Jobs) -> None:
    p = add_job(jobs, "eagle3", "train an EAGLE-3 head for a verifier", EAGLE3_ABOUT, EAGLE3_EXAMPLES)
    add_target_arg(p, "the verifier")
    add_preset_args(p, EAGLE3_PRESETS, "smollm2", "head and budgets",
                    f"work folder, its data shared with `yggc train drafter` (default {CACHE}/<data preset>)")
    p.add_argument("--steps", type=POSITIVE, metavar="N", help="training steps (default: the preset's)")
    add_chat_prompts_arg(p)
    p.add_argument("--prompts", type=POSITIVE, metavar="N",
                   help="training prompts the verifier answers (default: the data preset's); more adds shards")
    p.add_argument("--eval-prompts", type=POSITIVE, metavar="N",
                   help="prompts of each held-out split the verifier answers (default: the data preset's)")
    p.add_argument("--sampled-answers", action="store_true",
                   help="answer every training prompt once more, sampled at T = 1 (split train-t1), and train on "
                        "both: the head then also learns the contexts sampled decoding makes")
    add_gen_batch_arg(p)
    p.add_argument("--train-tokens", type=POSITIVE, metavar="N",
                   help="train on the leading conversations that hold about N answer tokens, generated and reference "
                        "alike (default: all); a scaling curve's points, each in OUT/eagle3-<preset>-<N>tok")
    p.add_argument("--draft-vocab", type=POSITIVE, metavar="N", help="draft vocabulary size (default: the preset's)")
    p.add_argument("--reference", type=whole_number(0), metavar="N",
                   help="training prompts also read with reference answers (default: the preset's; 0: none)")
    p.add_argument("--unroll", type=POSITIVE, metavar="N",
                   help="training-time-test steps (default: the preset's; >= 3)")
    p.add_argument("--score", type=Path, metavar="HEAD",
                   help="train nothing: score the head in folder HEAD (e.g. $(yggc pull smollm2 --eagle3)) on this "
                        "work folder's held-out splits, top-1 agreement per unroll position")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"],
                   help="the verifier's weights while it answers and is read for features (default float32); "
                        "bfloat16 is several times faster on CPUs with AVX512-BF16 or AMX; fixed per data folder")
    p.add_argument("--init", type=Path, metavar="HEAD",
                   help="start from the head in folder HEAD (e.g. $(yggc pull smollm2 --eagle3)) and its draft "
                        "vocabulary instead of a random head; the optimizer's moments start at zero")
    p.add_argument("--campaign", type=Path, metavar="DIR",
                   help="keep the answers and the best head in DIR (a folder to commit) and continue from them on any "
                        "machine: answers found there are not generated again, its head is the warm start")
    p.add_argument("--lr", type=float, metavar="LR", help="peak learning rate (default: the preset's; lower it for "
                   "a warm start)")
    p.add_argument("--schedule", choices=["cosine", "wsd"], default="cosine",
                   help="learning rate: warmup then cosine to --steps (default), or warmup-stable-decay: the peak "
                        "rate to --steps, which a later run may raise to train longer, then --decay steps of decay")
    p.add_argument("--decay", type=POSITIVE, metavar="N",
                   help="with --schedule wsd: decay over N steps after --steps and export the head (default: no "
                        "decay yet: the head is exported at --steps and the run can be extended)")
    p.add_argument("--autocast", choices=["auto", "on", "off"], default="auto",
                   help="train under bfloat16 autocast, float32 weights and loss (default auto: on where the CPU "
                        "has AVX512-BF16 or AMX, off elsewhere, where bfloat16 is many times slower)")
    add_budget_args(p, 2, 25, "stop training after this many minutes (rerun to resume)",
                    "start training over (the generated data is kept)")


def add_prompts_parser(jobs: Jobs) -> None:
    p = add_job(jobs, "prompts", "sample chat prompts the target writes itself (Magpie)", PROMPTS_ABOUT,
                PROMPTS_EXAMPLES)
    add_target_arg(p, "the instruct model that writes the prompts (it needs a chat template)")
    p.add_argument("--out", type=Path, metavar="DIR", help=f"output folder (default {CACHE}/magpie)")
    p.add_argument("--count", type=POSITIVE, default=20000, metavar="N", help="user turns to sample (default 20000)")
    p.add_argument("--batch", type=POSITIVE, default=64, metavar="N", help="turns sampled together (default 64)")
    p.add_argument("--max-new", type=POSITIVE, default=64, metavar="N",
                   help="tokens a turn may take; longer turns are dropped (default 64)")
    p.add_argument("--top-p", type=probability, default=1.0, metavar="P", help="nucleus sampling bound (default 1: none)")
    p.add_argument("--dtype", default="float32", choices=["bfloat16", "float32"],
                   help="the target's weights while sampling (default float32: faster without AVX512-BF16/AMX)")
    p.add_argument("--threads", type=POSITIVE, default=os.cpu_count(), metavar="N",
                   help=f"torch threads (default {os.cpu_count()})")
    p.add_argument("--seed", type=int, default=0, metavar="N", help="sampling seed (default 0)")
    p.add_argument("--stop-after", type=POSITIVE, metavar="N", help="stop after N shards in this run (rerun to resume)")
    p.add_argument("--json", metavar="FILE", help="also write the run's summary as JSON to FILE (-: stdout)")


def add_pair_parser(jobs: Jobs) -> None:
    p = add_job(jobs, "pair", "train a verifier + drafter pair on the Python stdlib", PAIR_ABOUT, PAIR_EXAMPLES)
    add_preset_args(p, PAIR_PRESETS, "demo", "model sizes and budgets", f"output folder (default {CACHE}/<preset>)")
    p.add_argument("--corpus-dir", type=Path, metavar="DIR", help="use *.py files under DIR instead of the stdlib")
    p.add_argument("--only", choices=("both", "verifier", "drafter"), default="both",
                   help="train just one model (the drafter needs OUT/verifier when distilling; default both)")
    p.add_argument("--verifier-minutes", type=float, metavar="MIN",
                   help="time budget of the verifier (over --max-minutes)")
    p.add_argument("--drafter-minutes", type=float, metavar="MIN",
                   help="time budget of the drafter (over --max-minutes)")
    p.add_argument("--steps", type=POSITIVE, metavar="N",
                   help="total optimizer steps per model (default: fit the time budget)")
    p.add_argument("--batch-size", type=POSITIVE, metavar="N", help="sequences per step (default: the preset's)")
    p.add_argument("--lr", type=float, metavar="LR", help="peak learning rate (default: the preset's)")
    p.add_argument("--seq-len", type=POSITIVE, metavar="N", help="training sequence length (default: the preset's)")
    p.add_argument("--vocab-size", type=POSITIVE, metavar="N", help="BPE vocabulary size (default: the preset's)")
    p.add_argument("--tokenizer", type=Path, metavar="FILE", help="reuse this tokenizer.json instead of training one")
    p.add_argument("--distill-alpha", type=float, metavar="A",
                   help="drafter loss = a*CE + (1-a)*KL(verifier||drafter) (default: the preset's)")
    p.add_argument("--no-distill", action="store_true", help="train the drafter on plain cross-entropy")
    p.add_argument("--compile", action=argparse.BooleanOptionalAction, default=None,
                   help="torch.compile the training step (default: the preset's)")
    p.add_argument("--autocast", action="store_true", help="bfloat16 autocast (slower without AVX512-BF16/AMX)")
    add_budget_args(p, os.cpu_count(), 200,
                    "time budget per model, over the preset's: the step count is fitted to it unless --steps is given",
                    "train a new tokenizer and start training over")


def add_evaluate_parser(jobs: Jobs) -> None:
    p = add_job(jobs, "evaluate", "held-out metrics of a pair from `yggc train pair`", EVALUATE_ABOUT)
    p.add_argument("--pair", type=Path, default=CACHE.expanduser() / "demo", metavar="DIR",
                   help=f"folder with verifier/ and drafter/, e.g. yggc/demo_pair (default {CACHE}/demo)")
    p.add_argument("--corpus-dir", type=Path, metavar="DIR", help="corpus root (default: the stdlib)")
    p.add_argument("--threads", type=POSITIVE, metavar="N", help="torch threads (default: torch's)")
    p.add_argument("--ctx", type=POSITIVE, default=512, metavar="N",
                   help="window length for perplexity and agreement (default 512)")
    p.add_argument("--max-eval-tokens", type=POSITIVE, default=131072, metavar="N",
                   help="cap on held-out tokens scored (default 131072)")
    p.add_argument("--prompts", type=POSITIVE, default=32, metavar="N", help="held-out prompts (default 32)")
    p.add_argument("--prompt-chars", type=POSITIVE, default=200, metavar="N",
                   help="characters per prompt (default 200)")
    p.add_argument("--new-tokens", type=POSITIVE, default=128, metavar="N",
                   help="verifier greedy tokens per prompt (default 128)")
    p.add_argument("--show-samples", type=whole_number(0), default=1, metavar="N",
                   help="print this many prompt + continuation pairs (default 1)")
    p.add_argument("--json", nargs="?", const="-", metavar="FILE",
                   help="also write the metrics as JSON to FILE (no FILE or -: stdout)")


def add_parser(sub: Verbs) -> None:
    """`yggc train JOB`: its flags, one parser per job; main runs the job."""
    p = sub.add_parser("train", help="train a drafter, an EAGLE-3 head or a demo pair (CPU, resumable)",
                       description=DESCRIPTION, epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    jobs = p.add_subparsers(dest="job", required=True, metavar="JOB")
    add_drafter_parser(jobs)
    add_eagle3_parser(jobs)
    add_prompts_parser(jobs)
    add_pair_parser(jobs)
    add_evaluate_parser(jobs)
    p.set_defaults(main=main)


def job_options(args: argparse.Namespace) -> TrainOptions:
    """`yggc train JOB`'s options, built once from its flags: each field from the flag of its name, `run` from the
    flags every training job has (--threads, --seed, --max-minutes, --stop-after, --ckpt-every, --no-resume), and
    `command` from this process's command line (recorded in the EAGLE-3 head's summary)."""
    made = {"command": shlex.join(["yggc", *sys.argv[1:]])}
    if hasattr(args, "ckpt_every"):
        made["run"] = RunSettings(threads=args.threads, seed=args.seed, max_minutes=args.max_minutes,
                                  stop_after=args.stop_after, ckpt_every=args.ckpt_every, resume=not args.no_resume)
    kind = OPTIONS[args.job]
    return kind(**{f.name: made[f.name] if f.name in made else getattr(args, f.name) for f in fields(kind)})


def main(args: argparse.Namespace) -> int:
    """Run the job with its options; print the folder it wrote (or --json the summary, or --score's curves)."""
    if args.json not in (None, "-") and not Path(args.json).parent.is_dir():
        raise YggcError(f"--json {args.json}: no folder {Path(args.json).parent} to write it in")
    options = job_options(args)
    summary = importlib.import_module(f"..train.{MODULES.get(args.job, args.job)}", __package__).run(options)
    if args.json:
        text = json.dumps(summary, indent=1)
        if args.json == "-":
            print(text)
            return 0
        Path(args.json).write_text(text + "\n")
    if args.job in WRITES and summary.get(WRITES[args.job]):
        print(summary[WRITES[args.job]])
    if "scored_head" in summary:  # eagle3 --score: one line per held-out split
        for key, curve in summary.items():
            if key.endswith("_agreement_per_step"):
                print(f"{key.removesuffix('_agreement_per_step')}: " + " / ".join(f"{a:.4f}" for a in curve))
    return 0
