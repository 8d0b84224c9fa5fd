"""Trials: one task, one agent, one sandbox, graded by the task's own tests.

`rlkit.rollout.trial` runs harbor's `Trial` on rlkit's sandbox backends and reduces each
result to a reward and a reason (`run_trial`, `run_trials`); `_verifier` is harbor's
verifier on a clean slate. The oracle and no-op agents are harbor's `oracle` and `nop`.
"""
