"""Prompt files of the briefing agent: per stage, a system text and in-context examples (TOML).

Why TOML and not free text: the examples are *data* (a question, documents, the expected output)
rendered into chat turns by the same function that renders the live request, so an example can
never drift from the format the model is asked to follow. Tuning a prompt touches no logic.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from functools import cache
from importlib.resources import files
from typing import Any


@dataclass(frozen=True)
class PromptFile:
    name: str
    system: str
    examples: tuple[dict[str, Any], ...]


@cache
def load(name: str) -> PromptFile:
    """``load("planner")`` reads ``planner.toml`` shipped with this package (read once)."""
    text = files(__package__).joinpath(f"{name}.toml").read_text(encoding="utf-8")
    data = tomllib.loads(text)
    return PromptFile(name, data["system"].strip(), tuple(data.get("examples", ())))
