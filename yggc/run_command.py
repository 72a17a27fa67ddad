"""`yggc run`: load the models, decode one prompt, stream text and report stats."""
from __future__ import annotations

import argparse
import json
import sys

from . import models
from .autoregressive import AutoregressiveDecoder
from .detokenize import StreamDecoder
from .sampling import SamplingParams


def make_decoder(args: argparse.Namespace, verifier: models.LoadedModel, drafter: models.LoadedModel | None):
    if drafter is None:
        return AutoregressiveDecoder(verifier.graph, verifier.layout)
    from .speculative import SpeculativeDecoder, TreeShape

    shape = TreeShape.from_args(args.depth, args.width, args.verify)
    return SpeculativeDecoder(verifier.graph, drafter.graph, verifier.layout, shape, chain_rule=args.chain_rule)


def load_models(args: argparse.Namespace) -> tuple[models.LoadedModel, models.LoadedModel | None]:
    dtype = models.parse_dtype(args.dtype)
    verifier_dir, drafter_dir = args.model, args.model_draft
    if verifier_dir is None:
        if drafter_dir is not None:
            raise models.YggcError("-md needs -m: name the verifier the drafter belongs to")
        verifier_dir, drafter_dir = models.demo_pair_dirs()
    max_seq = models.context_length(verifier_dir, args.max_seq)
    if drafter_dir is None:
        return models.load(verifier_dir, dtype, max_seq), None
    return models.load_pair(verifier_dir, drafter_dir, dtype, max_seq)


def run_command(args: argparse.Namespace) -> int:
    params = SamplingParams(args.temp, args.top_k, args.top_p, args.seed)
    verifier, drafter = load_models(args)
    prompt_ids = args.prompt_ids if args.prompt_ids is not None else models.encode_prompt(verifier.tokenizer, args.prompt)
    decoder = make_decoder(args, verifier, drafter)
    text = StreamDecoder(verifier.tokenizer)
    for tokens in decoder.stream(prompt_ids, args.n_predict, params, verifier.eos_ids):
        piece = text.push(tokens)
        if piece and not args.json:
            sys.stdout.write(piece)
            sys.stdout.flush()
    stats = decoder.stats
    if args.json:
        out = {"tokens": text.ids, "text": text.text(), "prompt_ids": prompt_ids, **stats.summary()}
        print(json.dumps(out))
    else:
        print()
        for line in stats.log_lines():
            print(f"yggc: {line}", file=sys.stderr)
    return 0
