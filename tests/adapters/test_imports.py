"""An adapter's import pulls in its own framework only; the client pulls in none."""

from __future__ import annotations

import subprocess
import sys

import pytest

FRAMEWORKS = {
    "langchain": "stallwatch.adapters.langchain",
    "agents": "stallwatch.adapters.openai_agents",
    "pydantic_ai": "stallwatch.adapters.pydantic_ai",
}
OTHERS = ("faust", "langchain", "langgraph", "agents", "pydantic_ai")


def loaded_after(module: str) -> set[str]:
    code = f"import sys, {module}; print(' '.join(sorted({{m.split('.')[0] for m in sys.modules}})))"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    return set(done.stdout.split())


@pytest.mark.parametrize("framework", sorted(FRAMEWORKS))
def test_an_adapter_imports_its_framework_and_no_other(framework: str):
    loaded = loaded_after(FRAMEWORKS[framework])
    assert framework in loaded
    unwanted = {m for m in OTHERS if m != framework and not (framework == "langchain" and m == "langgraph")}
    assert not loaded & unwanted


def test_the_client_and_the_adapters_core_import_no_framework():
    assert not loaded_after("stallwatch.client, stallwatch.adapters.core") & set(OTHERS)
