"""`rlkit proxy serve`: run the token-recording proxy standalone."""

from __future__ import annotations

import argparse
import json

from rlkit.config.schema import DEFAULT_PROXY_PORT
from rlkit.errors import UserError


def _parser() -> argparse.ArgumentParser:
    from rlkit.proxy.core import DEFAULT_MAX_CALLS, DEFAULT_MAX_SESSION_TOKENS

    p = argparse.ArgumentParser(prog="rlkit proxy", description="token-recording proxy in front of vLLM")
    sub = p.add_subparsers(dest="action", required=True)
    s = sub.add_parser("serve", help="serve OpenAI + Anthropic APIs, recording token ids per session")
    s.add_argument("--model-path", required=True, help="model dir (tokenizer + chat template)")
    s.add_argument("--upstream", action="append", required=True,
                   help="vLLM base URL, e.g. http://127.0.0.1:8000 (repeat for replicas)")
    s.add_argument("--port", type=int, default=DEFAULT_PROXY_PORT)
    s.add_argument("--host", default="127.0.0.1")
    s.add_argument("--tool-call-parser", default="qwen3_coder", help="TOOL_CALL_PARSER (verl parser name)")
    s.add_argument("--served-model-name", default=None, help="vLLM's --served-model-name (default: model path)")
    s.add_argument("--max-model-len", type=int, default=32768, help="context window (MAX_PROMPT + MAX_RESP)")
    s.add_argument("--max-response-tokens", type=int, default=None,
                   help="cap per call; keep it at or above the client's own max_tokens, or the client sees "
                        "truncated replies (Claude Code: 'output token limit' retry turns)")
    s.add_argument("--max-calls-per-session", type=int, default=DEFAULT_MAX_CALLS,
                   help="model calls a session may make, refused requests included (default %(default)s)")
    s.add_argument("--max-response-tokens-per-session", type=int, default=DEFAULT_MAX_SESSION_TOKENS,
                   help="tokens after a session's first prompt, generated and inserted (MAX_RESP; "
                        "default %(default)s)")
    s.add_argument("--first-token-timeout", type=float, default=600.0, metavar="S",
                   help="end a call with an API error when vLLM sends no first token within S seconds "
                        "(queueing + prefill; default %(default)s)")
    s.add_argument("--token-timeout", type=float, default=120.0, metavar="S",
                   help="end a call when vLLM sends no next token within S seconds (default %(default)s)")
    s.add_argument("--strict-parser-check", action="store_true",
                   help="refuse to start when the parser cannot read the chat template's tool calls")
    s.add_argument("--no-anthropic-warm-up", dest="warm_anthropic", action="store_false",
                   help="import the Anthropic adapter (litellm, seconds) at the first Anthropic request, "
                        "not at start: for scaffolds that speak the OpenAI API")
    s.add_argument("--sampling", default="{}", help='default sampling params as JSON, e.g. \'{"temperature": 1}\'')
    c = sub.add_parser("check-parser", help="does TOOL_CALL_PARSER read the chat template's own tool calls?")
    c.add_argument("--model-path", required=True)
    c.add_argument("--tool-call-parser", required=True)
    return p


def _check_parser(model_path: str, parser_name: str) -> int:
    import asyncio

    from rlkit.proxy.parsers import describe, probe

    verdict = asyncio.run(probe(model_path, parser_name))
    print(f"{'✓' if verdict['ok'] else '✗'} {describe(verdict)}")
    if not verdict["ok"] and verdict["completion"]:
        print(f"  the template renders a tool call as:\n{verdict['completion']}")
    return 0 if verdict["ok"] else 1


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    if args.action == "check-parser":
        return _check_parser(args.model_path, args.tool_call_parser)
    import asyncio
    import logging

    from rlkit.proxy.core import ProxyConfig
    from rlkit.proxy.parsers import preload_verl_parsers
    from rlkit.proxy.server import serve_forever
    from rlkit.proxy.toolcalls import ProxyEventLoop

    try:
        sampling = json.loads(args.sampling)
    except ValueError as exc:
        raise UserError(f"--sampling is not JSON: {exc}", key="--sampling", fix="pass a JSON object") from exc
    config = ProxyConfig(model_path=args.model_path, upstreams=args.upstream, port=args.port, host=args.host,
                         tool_call_parser=args.tool_call_parser, served_model_name=args.served_model_name,
                         max_model_len=args.max_model_len, max_response_tokens=args.max_response_tokens,
                         max_calls_per_session=args.max_calls_per_session,
                         max_response_tokens_per_session=args.max_response_tokens_per_session,
                         first_token_timeout_s=args.first_token_timeout, token_timeout_s=args.token_timeout,
                         default_sampling=sampling, strict_parser_check=args.strict_parser_check,
                         warm_anthropic=args.warm_anthropic)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    preload_verl_parsers()
    try:
        asyncio.run(serve_forever(config), loop_factory=ProxyEventLoop)
    except KeyboardInterrupt:
        return 130
    return 0
