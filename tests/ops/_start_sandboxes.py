"""Run as a script: start N sandboxes of a task, each running a long command, then hang.

Used by the crash-cleanup test, which kill -9s this process."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from tests.sandbox._helpers import make_env


async def main(task: Path, tmp: Path, project: str, count: int) -> None:
    envs = [make_env(task, tmp, project=project, experiment="crash", step=1) for _ in range(count)]
    await asyncio.gather(*(env.start(force_build=False) for env in envs))
    running = [asyncio.create_task(env.exec("sleep 600")) for env in envs]
    await asyncio.sleep(0.5)
    print("ready", flush=True)
    await asyncio.gather(*running)


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], int(sys.argv[4])))
