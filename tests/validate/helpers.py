"""Builders for run configs and task indexes used by config, validate and launch tests."""

from __future__ import annotations

import socket
import socketserver
import threading
from pathlib import Path
from typing import Self

from rlkit.tasks.schema import REQUIRED_COLUMNS


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_index(path: Path, rows: int = 2, drop: tuple[str, ...] = ()) -> Path:
    """A small task index with the task-index columns (minus `drop`)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    columns = {c: [f"{c}-{i}" for i in range(rows)] for c in REQUIRED_COLUMNS if c not in drop}
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table(columns) if columns else pa.table({"x": list(range(rows))}), path)
    return path


def env_text(values: dict[str, object]) -> str:
    return "".join(f"{k}={v}\n" for k, v in values.items() if v is not None)


class Workspace:
    """A tmp run setup: site.env, task indexes, output dir, free ports."""

    def __init__(self, root: Path, model_dir: Path) -> None:
        self.root = root
        self.model_dir = model_dir
        self.train = write_index(root / "data" / "train.parquet")
        self.val = write_index(root / "data" / "val.parquet")
        self.site = root / "site.env"
        self.site_values: dict[str, object] = {
            "GPUS_PER_NODE": 2, "RAY_PORT": free_port(), "PROXY_PORT": free_port(),
            "DASHBOARD_PORT": free_port(), "DOCKER_HOST": f"unix://{root / 'no-docker.sock'}",
        }
        self.write_site()
        self.cache = root / "cache"

    def write_site(self, **over: object) -> Path:
        self.site_values.update(over)
        self.site.write_text(env_text(self.site_values))
        return self.site

    def run_values(self) -> dict[str, object]:
        return {
            "PROJECT_NAME": "proj", "EXP_NAME": "exp", "SCAFFOLD": "terminus", "BACKEND": "docker",
            "TRAINING_MODE": "sync", "MODEL_ENGINE": "fsdp", "ALGORITHM": "grpo", "NNODES": 1,
            "N_NODES_TRAIN": 1, "N_NODES_ROLLOUT": 0, "SP_SIZE": 1, "ROLLOUT_TP": 1,
            "MODEL_PATH": self.model_dir, "TOOL_CALL_PARSER": "qwen3_coder", "TRAIN_FILES": self.train,
            "VAL_FILES": self.val, "TRAIN_BSZ": 2, "N_RESP": 2, "MINI_BSZ": 2, "MAX_PROMPT": 1024,
            "MAX_RESP": 2048, "OUTPUT_DIR": self.root / "out",
        }

    def config(self, name: str = "run.env", text: str | None = None, **over: object) -> Path:
        values = self.run_values()
        values.update(over)
        path = self.root / name
        path.write_text(env_text(values) if text is None else text)
        return path

    def environ(self, **extra: str) -> dict[str, str]:
        return {"RLKIT_SITE_ENV": str(self.site), "RLKIT_CACHE_DIR": str(self.cache), **extra}

    def preflight(self, config: Path, only: list[str] | None = None, **kw):
        from rlkit.validate.preflight import run_preflight

        kw.setdefault("environ", self.environ())
        return run_preflight(config, only=only, **kw)


class FakeDockerDaemon:
    """Answers GET /_ping like dockerd, on a unix socket."""

    def __init__(self, path: Path) -> None:
        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                self.request.recv(1024)
                self.request.sendall(b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nOK")

        self.path = path
        self.server = socketserver.UnixStreamServer(str(path), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Self:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def run_cli(argv: list[str], env: dict[str, str], *, timeout_s: float = 120.0) -> tuple[int, str]:
    """`rlkit ARGV` in this process, as the command runs it (its terminal streams and log handlers
    cleaned); returns (exit code, everything it printed). An exception escaping the command fails the
    caller's test, as a traceback would; a command still running after `timeout_s` fails it too."""
    import contextlib
    import io
    import os
    from unittest import mock

    from rlkit.cli.main import main

    out = io.StringIO()
    box: dict[str, object] = {}

    def target() -> None:
        try:
            box["rc"] = main(argv)
        except BaseException as exc:  # noqa: BLE001 -- handed to the caller
            box["error"] = exc

    with mock.patch.dict(os.environ, env), contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        thread = threading.Thread(target=target, daemon=True)
        thread.start()
        thread.join(timeout_s)  # a hang guard, not a speed test
    assert not thread.is_alive(), f"rlkit {' '.join(argv)} did not finish within {timeout_s} s"
    if "error" in box:
        raise box["error"]  # type: ignore[misc]
    return int(box["rc"]), out.getvalue()  # type: ignore[call-overload]
