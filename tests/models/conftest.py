"""The memory tests' scenario fixtures (tests/memory/conftest.py), for the encoder tests that run a strategy."""

from tests.memory.conftest import episode, fill, q  # noqa: F401
