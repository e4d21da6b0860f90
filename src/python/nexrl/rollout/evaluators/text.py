"""Text normalisation shared by the evaluators."""

from __future__ import annotations

import re
import string
import unicodedata

__all__ = ["normalise"]

_PUNCT = str.maketrans("", "", string.punctuation)


def normalise(text: str, *, case: bool, whitespace: bool, punctuation: bool) -> str:
    """``text`` (NFKC) lower-cased when ``case``, without ASCII punctuation when
    ``punctuation``, with runs of whitespace made one space and the ends stripped when
    ``whitespace``."""
    text = unicodedata.normalize("NFKC", str(text))
    if case:
        text = text.casefold()
    if punctuation:
        text = text.translate(_PUNCT)
    if whitespace:
        text = re.sub(r"\s+", " ", text).strip()
    return text
