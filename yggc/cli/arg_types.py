"""argparse value types shared by the `yggc` subcommands (each error becomes one usage line, exit 2), and the type
of the subparsers each verb adds its parser to."""
from __future__ import annotations

import argparse

Verbs = argparse._SubParsersAction  # what add_subparsers returns: each verb module adds its parser to it


def whole_number(minimum: int):
    """A parser of integers >= minimum."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"expected a number >= {minimum}, got {value}")
        return value

    return parse


def probability(text: str) -> float:
    """A number in (0, 1]."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1], got {text!r}") from None
    if not 0.0 < value <= 1.0:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1], got {value}")
    return value


def seconds(text: str) -> float:
    """A duration in seconds, above zero and finite."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not 0.0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"expected a number of seconds above 0, got {value}")
    return value


def comma_list(text: str) -> list[str]:
    return [t for t in text.replace(" ", "").split(",") if t]


def token_ids(text: str) -> list[int]:
    try:
        return [int(t) for t in comma_list(text)]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated token ids like 1,2,3, got {text!r}") from None
