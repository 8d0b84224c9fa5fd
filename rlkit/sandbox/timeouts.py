"""The exec-timeout error of both sandbox backends.

It is an rlkit `SandboxTimeout` and also a builtin `TimeoutError`, so harbor's Trial
(which maps `asyncio.TimeoutError` around the agent and verifier phases to
AgentTimeoutError / VerifierTimeoutError) reports a command timeout as that phase's
timeout instead of an unknown crash.
"""

from __future__ import annotations

from rlkit.errors import SandboxTimeout


class SandboxExecTimeout(SandboxTimeout, TimeoutError):
    """A command inside a sandbox ran past `timeout_sec`; it was killed."""

    retryable = False
