"""The scripted teacher, as the real proxy sees it: vLLM-shaped answers the proxy records.

No docker, no vLLM: the teacher is the proxy's upstream and the test talks to the proxy
as Terminus-2 does (OpenAI chat completions on a session URL).
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from rlkit.train._teacher import (
    CONFIRM_HINT,
    TeacherScript,
    TeacherServer,
    command_duration,
    command_lines,
    fix_action,
    solution_keystrokes,
)

REPO = Path(__file__).resolve().parents[2]
TASK = REPO / "examples" / "tasks" / "word-frequency"
OTHER = REPO / "examples" / "tasks" / "lru-cache-recency"


def _terminus_prompt(task_dir: Path) -> str:
    instruction = (task_dir / "instruction.md").read_text()
    return f"You are an AI assistant...\n\nTask Description:\n{instruction}\n\nCurrent terminal state:\nroot@box:/app# "


def test_solution_keystrokes_keep_commands_and_heredoc_only() -> None:
    keys = solution_keystrokes((TASK / "solution" / "solve.sh").read_text())
    assert keys.startswith("cd /app\ngit apply")
    assert "#!/bin/bash" not in keys and "set -euo" not in keys
    assert keys.rstrip("\n").endswith("PATCH")  # the heredoc is closed, every line sent
    body = keys.split("<<'PATCH'\n", 1)[1]
    assert body.startswith("--- a/")  # heredoc lines are kept verbatim, comments included


def test_script_picks_the_task_and_confirms() -> None:
    script = TeacherScript.from_task_dirs([TASK, OTHER])
    fix = json.loads(script.reply(_terminus_prompt(TASK)))
    assert "wordfreq/count.py" in fix["commands"][0]["keystrokes"] and fix["task_complete"] is True
    other = json.loads(script.reply(_terminus_prompt(OTHER)))
    assert "cachekit/lru.py" in other["commands"][0]["keystrokes"]
    confirm = json.loads(script.reply(_terminus_prompt(TASK) + f"<|im_start|>user\n{CONFIRM_HINT}?"))
    assert confirm["commands"] == [] and confirm["task_complete"] is True

def test_the_teacher_takes_a_tasks_fixes_in_turn_one_per_trial() -> None:
    """With decoys, trial i of a task gets fix i mod n (the oracle, then solution/decoys/*.sh in name order);
    a later turn of a trial repeats its own fix; the confirmation takes no turn of the rota."""
    decoys = sorted((OTHER / "solution" / "decoys").glob("*.sh"))
    assert len(decoys) == 3
    fixes = [solution_keystrokes(p.read_text()) for p in [OTHER / "solution" / "solve.sh", *decoys]]
    assert len(set(fixes)) == 4  # the decoys differ from the oracle and from each other
    script = TeacherScript.from_task_dirs([OTHER])
    first = _terminus_prompt(OTHER) + "<|im_start|>assistant\n"

    def keystrokes(prompt: str) -> str:
        return json.loads(script.reply(prompt))["commands"][0]["keystrokes"]

    assert keystrokes(first) == fixes[0]
    later = first + "{}<|im_end|>\n<|im_start|>user\nNew Terminal Output: ...<|im_start|>assistant\n"
    assert keystrokes(later) == fixes[0]  # the same trial's next turn
    assert json.loads(script.reply(later + f"<|im_start|>user\n{CONFIRM_HINT}?"))["task_complete"] is True
    assert [keystrokes(first) for _ in range(5)] == [fixes[1], fixes[2], fixes[3], fixes[0], fixes[1]]
    plain = TeacherScript.from_task_dirs([OTHER], decoys=False)
    assert {json.loads(plain.reply(first))["commands"][0]["keystrokes"] for _ in range(3)} == {fixes[0]}


def test_the_warm_start_imitates_decoys_only_when_they_ran_to_a_graded_failure() -> None:
    from rlkit.rollout.records import Outcome, TokenSegment, TrialRecord
    from rlkit.train.sft import taught_records

    segment = TokenSegment(prompt_ids=[1], response_ids=[2, 3], response_mask=[1, 1], response_logprobs=[0.0, 0.0])

    def record(outcome: Outcome, reward: float) -> TrialRecord:
        return TrialRecord(uid="t", task_id="t", session=outcome.value, outcome=outcome, reward=reward,
                           masked=outcome.masked, segments=[segment])

    records = [record(Outcome.PASSED, 1.0), record(Outcome.FAILED_TESTS, 0.0), record(Outcome.AGENT_ERROR, 0.0),
               record(Outcome.SANDBOX_ERROR, 0.0)]
    assert [r.session for r in taught_records(records, decoys=True)] == ["passed", "failed_tests"]
    assert [r.session for r in taught_records(records, decoys=False)] == ["passed"]


def test_the_warm_start_names_a_decoy_that_passes_its_tests() -> None:
    from rlkit.rollout.records import Outcome, TrialRecord
    from rlkit.train.sft import decoy_problems

    def records(task: str, rewards: list[float]) -> list[TrialRecord]:
        return [TrialRecord(uid=task, task_id=task, session=f"{task}{i}", reward=r,
                            outcome=Outcome.PASSED if r else Outcome.FAILED_TESTS, masked=False)
                for i, r in enumerate(rewards)]

    found = decoy_problems(records("a", [1, 0, 0]) + records("b", [1, 1, 0]) + records("c", [1, 1, 1]),
                           {"a": 3, "b": 3, "c": 1}, 3)
    assert found == [("b: 2 of 3 teacher trials passed, but only 1 ran the oracle: a decoy in solution/decoys/ "
                     "passes the tests")]


def test_the_teacher_waits_as_terminus_asks_short_for_file_edits_long_for_the_rest() -> None:
    """Terminus-2 sleeps each command's whole duration; its prompt asks 0.1 s for immediate commands.
    Every bundled fix is a `git apply` heredoc: 0.1 s (it was 1.0 s, ~40% of a trial's agent time)."""
    for solve in sorted(TASK.parent.glob("*/solution/solve.sh")):
        action = fix_action(solve.read_text())
        assert action["commands"][0]["duration"] == 0.1, solve
    heredoc = "cd /app\ncat > run.sh <<'EOF'\nmake -j8\npython3 slow.py\nEOF\n"
    assert command_lines(heredoc) == ["cd /app", "cat > run.sh <<'EOF'"]
    assert command_duration(heredoc) == 0.1  # the body is written, not run
    assert command_duration("cd /app\npip install -e .\n") == 1.0
    assert command_duration("make\n") == 1.0


def test_a_new_teacher_version_is_a_new_warm_start(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from rlkit.train import _teacher
    from rlkit.train.sft import SftSettings, cache_key

    model = tmp_path / "m"
    model.mkdir()
    (model / "config.json").write_text("{}")
    before = cache_key([TASK], model, SftSettings())
    monkeypatch.setattr(_teacher, "TEACHER_VERSION", _teacher.TEACHER_VERSION + 1)
    assert cache_key([TASK], model, SftSettings()) != before

@pytest.fixture
def teacher_proxy(tiny_model_dir: Path):
    from rlkit.proxy import BackgroundProxy, ProxyConfig

    script = TeacherScript.from_task_dirs([TASK, OTHER])
    with TeacherServer(tiny_model_dir, script, served_model_name="policy", max_model_len=8192) as teacher, \
            BackgroundProxy(ProxyConfig(model_path=str(tiny_model_dir), upstreams=[teacher.url], port=0,
                                        served_model_name="policy", max_model_len=16384)) as proxy:
        yield teacher, proxy


def _chat(proxy, session: str, messages: list[dict]) -> str:
    response = httpx.post(f"{proxy.openai_base_url(session)}/chat/completions", timeout=60, trust_env=False,
                          json={"model": "policy", "messages": messages, "temperature": 1.0})
    response.raise_for_status()
    return response.json()["choices"][0]["message"]["content"]


def test_proxy_records_teacher_tokens_as_sampled(teacher_proxy) -> None:
    from harbor.agents.terminus_2.terminus_json_plain_parser import TerminusJSONPlainParser

    teacher, proxy = teacher_proxy
    # the proxy clamped its window to what the teacher's /v1/models announced
    assert proxy.server.core.max_model_len == 8192
    messages = [{"role": "user", "content": _terminus_prompt(TASK)}]
    first = _chat(proxy, "s1", messages)
    parsed = TerminusJSONPlainParser().parse_response(first)
    assert not parsed.error and parsed.is_task_complete
    assert parsed.commands[0].keystrokes == solution_keystrokes((TASK / "solution" / "solve.sh").read_text())

    messages += [{"role": "assistant", "content": first},
                 {"role": "user", "content": f"New Terminal Output:\n\n{CONFIRM_HINT}? ..."}]
    second = _chat(proxy, "s1", messages)
    assert TerminusJSONPlainParser().parse_response(second).commands == []

    record = proxy.trajectory("s1")
    assert (record["num_segments"], record["num_breaks"]) == (1, 0)
    [segment] = record["segments"]
    tokens = teacher.tokenizer
    first_ids = tokens.encode(first, add_special_tokens=False) + [teacher.eos_id]
    second_ids = tokens.encode(second, add_special_tokens=False) + [teacher.eos_id]
    response, mask = segment["response_ids"], segment["response_mask"]
    # teacher tokens are model tokens (mask 1, logprob 0.0); the user turn between is mask 0
    assert response[:len(first_ids)] == first_ids and response[-len(second_ids):] == second_ids
    assert mask[:len(first_ids)] == [1] * len(first_ids) and mask[-len(second_ids):] == [1] * len(second_ids)
    assert 0 < mask.count(0) == len(response) - len(first_ids) - len(second_ids)
    assert all(lp == 0.0 for lp in segment["response_logprobs"])


def test_teacher_cuts_at_max_tokens_like_vllm(tiny_model_dir: Path) -> None:
    script = TeacherScript.from_task_dirs([TASK])
    with TeacherServer(tiny_model_dir, script) as teacher:
        ids = teacher.tokenizer.encode(_terminus_prompt(TASK), add_special_tokens=False)
        body = httpx.post(f"{teacher.url}/v1/completions", json={"prompt": ids, "max_tokens": 5},
                          timeout=30, trust_env=False).json()
        assert httpx.get(f"{teacher.url}/health", trust_env=False).status_code == 200
    [choice] = body["choices"]
    assert choice["finish_reason"] == "length" and len(choice["token_ids"]) == 5
    assert choice["logprobs"]["token_logprobs"] == [0.0] * 5
