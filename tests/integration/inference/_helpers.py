"""Constants shared by the tests that talk to an embedded server (see tests/conftest.py)."""

from __future__ import annotations

SERVED_NAME = "tiny"  # the model name every test server answers to
BIGRAM_REPLY = "The answer is 9"  # what the bigram model says after every generation prompt
MESSAGES = [{"role": "user", "content": "What is the largest of 3 7 5?"}]
