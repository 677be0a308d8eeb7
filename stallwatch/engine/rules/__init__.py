"""One rules object per mode, behind the detector: researcher, chat and coder."""

from __future__ import annotations

from stallwatch.engine.rules.base import Rules
from stallwatch.engine.rules.chat import ChatRules
from stallwatch.engine.rules.coder import CoderRules
from stallwatch.engine.rules.researcher import ResearcherRules

RULES_BY_MODE: dict[str, type[Rules]] = {
    "researcher": ResearcherRules,
    "chat": ChatRules,
    "coder": CoderRules,
}
