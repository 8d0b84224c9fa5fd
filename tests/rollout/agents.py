"""Test agents (harbor agents loaded by import path) that try to cheat the verifier."""

from __future__ import annotations

from harbor.agents.base import BaseAgent
from harbor.environments.base import BaseEnvironment
from harbor.models.agent.context import AgentContext

# Every trick an agent could try from inside the sandbox during its turn:
#  1. write reward files directly;
#  2. plant a pytest.ini / conftest.py under /tests that would make pytest "pass";
#  3. leave a background process that rewrites reward.txt = 1 once the tests finished,
#     i.e. after harbor's verifier deleted the stale reward files.
FORGE = r"""
mkdir -p /logs/verifier /tests
echo 1 > /logs/verifier/reward.txt
echo '{"reward": 1}' > /logs/verifier/reward.json
printf '[pytest]\naddopts = --collect-only\n' > /tests/pytest.ini
printf 'import pytest\ndef pytest_collection_modifyitems(items):\n    items.clear()\n' > /tests/conftest.py
nohup bash -c '
  while ! grep -q "reward" /logs/verifier/test-stdout.txt 2>/dev/null; do sleep 0.02; done
  echo 1 > /logs/verifier/reward.txt; echo "{\"reward\": 1}" > /logs/verifier/reward.json
' >/dev/null 2>&1 &
echo forged
"""


class ForgingAgent(BaseAgent):
    @staticmethod
    def name() -> str:
        return "forging-agent"

    def version(self) -> str:
        return "1.0.0"

    async def setup(self, environment: BaseEnvironment) -> None:
        return None

    async def run(self, instruction: str, environment: BaseEnvironment, context: AgentContext) -> None:
        result = await environment.exec(command=FORGE, user="root")
        if "forged" not in (result.stdout or ""):
            raise RuntimeError(f"forging failed: {result.stdout} {result.stderr}")


class CrashingAgent(BaseAgent):
    """Raises during its turn (an agent bug); the trial must still be graded and cleaned up."""

    @staticmethod
    def name() -> str:
        return "crashing-agent"

    def version(self) -> str:
        return "1.0.0"

    async def setup(self, environment: BaseEnvironment) -> None:
        return None

    async def run(self, instruction: str, environment: BaseEnvironment, context: AgentContext) -> None:
        raise RuntimeError("agent bug")


class PeekingAgent(BaseAgent):
    """Records whether the hidden tests or the reference solution are visible during its turn."""

    @staticmethod
    def name() -> str:
        return "peeking-agent"

    def version(self) -> str:
        return "1.0.0"

    async def setup(self, environment: BaseEnvironment) -> None:
        return None

    async def run(self, instruction: str, environment: BaseEnvironment, context: AgentContext) -> None:
        await environment.exec(
            command="mkdir -p /logs/agent; { ls -A /tests /solution 2>&1; echo end; } > /logs/agent/peek.txt",
            user="root")
