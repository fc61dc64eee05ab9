"""The project's error types that every layer raises (a leaf module: it imports nothing of the project)."""

from __future__ import annotations


class ConfigError(ValueError):
    """One or more invalid config values; ``problems`` holds one line per problem."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = list(problems)
        super().__init__("\n".join(self.problems))
