"""Every command the API stands behind prints the API's result with --json.

The equality of each command's `--json` with its function's `as_dict()` is asserted next to that
function's own test: check, train, run (test_check_train_run), status (test_status), rollout, eval,
tasks check (test_passes), cleanup, ckpt merge, ckpt prune (test_ops). This one holds the list."""

from __future__ import annotations

import pytest

import rlkit

COMMANDS = {"check": ["check"], "train": ["train"], "run": ["run"], "status": ["status"],
            "rollout": ["rollout"], "eval": ["eval"], "cleanup": ["cleanup"], "tasks_check": ["tasks", "check"],
            "ckpt_merge": ["ckpt", "merge"], "ckpt_prune": ["ckpt", "prune"]}


def test_every_api_function_has_a_command_with_json(capsys: pytest.CaptureFixture[str]) -> None:
    from rlkit.cli.main import main

    assert set(COMMANDS) == set(rlkit.__all__) - {"__version__", "resolve"}
    for function, argv in COMMANDS.items():
        assert getattr(rlkit, function).__doc__, function
        with pytest.raises(SystemExit) as done:
            main([*argv, "--help"])
        assert done.value.code == 0
        assert "--json" in capsys.readouterr().out, argv
