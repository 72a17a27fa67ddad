"""Training the models yggc drafts with, behind `yggc train` (needs the train extra: pip install 'yggc[train]').

Three training jobs, each resumable and deterministic (a stopped run continues when the same command is run
again, and a resumed run gives the weights of one uninterrupted run), and two helpers of theirs:

- pair.py: a matched verifier/drafter pair on the Python stdlib (the shipped demo pair), evaluate.py its
  held-out metrics;
- drafter.py: a small standalone drafter distilled from a target's own answers (the shipped SmolLM2 drafter);
- eagle3_head.py: an EAGLE-3 head for a verifier (the shipped SmolLM2 head), trained by the training-time test
  of ttt.py;
- magpie.py: chat prompts an instruct target writes itself, for the drafter and EAGLE-3 jobs.

Each job's `run` takes its frozen options of options.py, which the CLI builds once from the flags.
What they share: corpus.py (the stdlib corpus and its held-out split), stdlib_prompts.py (chat prompts made from
it), human_prompts.py (human-written prompt sets), shards.py (the target's answers and soft labels), presets.py
(sizes and budgets), batches.py (which items a step reads), loop.py (the training loop, its schedules, pausing)
and student.py (the standalone drafter's model and loss). The EAGLE-3 job adds ttt.py (its loss), features.py (the
verifier's features, cached) and campaign.py (answers and heads kept in a folder to commit). The runtime never
imports this package.
"""
