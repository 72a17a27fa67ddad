"""Third-party warnings that say nothing to a yggc user, filtered in every process the CLI starts (ranks too)."""
from __future__ import annotations

import re
import warnings

# (category, message prefix); torch.export prints the first one twice per exported bucket (torch 2.13).
THIRD_PARTY_NOISE = (
    (FutureWarning, "`isinstance(treespec, LeafSpec)` is deprecated"),
)


def silence_third_party_noise() -> None:
    """Hide THIRD_PARTY_NOISE (raised in this process, by torch.export); every other warning still shows."""
    for category, prefix in THIRD_PARTY_NOISE:
        warnings.filterwarnings("ignore", message=re.escape(prefix), category=category)
