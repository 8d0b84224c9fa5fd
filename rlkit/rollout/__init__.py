"""Rollout: trials of a model (or a reference agent) on task rows, and what they add up to.

`engine.RolloutEngine` runs a step's trials concurrently (MAX_SANDBOXES), sets each proxy
session's budgets, retries infrastructure failures, and reduces each trial to one
`records.TrialRecord` (outcome, reward, token segments, timings); `summary` writes
`step_<N>/summary.json`. `trial` runs one harbor `Trial` on rlkit's sandbox backends;
`_verifier` is harbor's verifier on a clean slate. `passes` runs k attempts per index row
(resumable) for `rlkit rollout` and `rlkit eval`; `passk` is the unbiased pass@k.
"""
