"""Scaffold adapters: cc (Claude Code), ohsdk (OpenHands SDK), oc (OpenCode), terminus (Terminus-2).

`get_scaffold(name)` returns an adapter; `adapter.agent_config(ScaffoldRun(...))` gives
the harbor `AgentConfig` the trial runner hands to harbor's `Trial`. Adapters are light
(no harbor import) so `rlkit check` can validate SCAFFOLD cheaply.
"""

from __future__ import annotations

from rlkit.registry import Registry
from rlkit.scaffolds.base import DEFAULT_PROXY_URL, Scaffold, ScaffoldRun

SCAFFOLDS: Registry[type[Scaffold]] = Registry("scaffold")
SCAFFOLDS.register("cc", "rlkit.scaffolds.cc:ClaudeCodeScaffold")
SCAFFOLDS.register("ohsdk", "rlkit.scaffolds.ohsdk:OpenHandsSDKScaffold")
SCAFFOLDS.register("oc", "rlkit.scaffolds.oc:OpenCodeScaffold")
SCAFFOLDS.register("terminus", "rlkit.scaffolds.terminus:TerminusScaffold")


def get_scaffold(name: str) -> Scaffold:
    """The adapter registered as `name` (or a "module:Class" plug-in)."""
    return SCAFFOLDS.get(name)()


__all__ = ["DEFAULT_PROXY_URL", "SCAFFOLDS", "Scaffold", "ScaffoldRun", "get_scaffold"]
