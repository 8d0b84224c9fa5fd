"""`rlkit images dockerd|base|build|agents`: the docker daemon, the offline base image, per-task
images and the in-container agents' images.

  rlkit images dockerd
      make sure a docker daemon answers (starts dockerd as root, logs to .rlkit/dockerd.log)
  rlkit images base [--force] [--mirror URL]
      build rlkit/base:bookworm with mmdebstrap + docker import (skipped when an image
      with the same recipe hash exists)
  rlkit images build [TASKS_DIR|INDEX.parquet] [--registry R] [--push] [--force] [--scaffold NAME [--bake]]
      build rlkit-task/<task_id>:latest from each task's environment/Dockerfile (reused while
      the hash of environment/ matches, also tagged :src-<hash>);
      --scaffold makes that agent's (cc|ohsdk|oc) image and the one read-only volume every sandbox
      mounts it from; with --bake (AGENT_DELIVERY=bake) it is baked on top of each task image as
      rlkit-task/<task_id>:<scaffold> instead (stored again for every task)
  rlkit images agents [NAME ...] [--force]
      build the in-container agents' images rlkit/agent-<name>:<version> (default every scaffold
      in a sandbox: cc oc ohsdk), one at a time per agent across processes; sandboxes mount their
      tree from one volume each (a baked scaffold layer copies from them)
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

DEFAULT_TASKS = Path("examples/tasks")


def _dockerd(argv: list[str]) -> int:
    argparse.ArgumentParser(prog="rlkit images dockerd").parse_args(argv)
    from rlkit.sandbox.dockerd import ensure_dockerd

    print(f"✓ dockerd answers on {ensure_dockerd()}")
    return 0


def _base(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="rlkit images base")
    parser.add_argument("--force", action="store_true", help="rebuild even when the recipe is unchanged")
    parser.add_argument("--mirror", help="Debian mirror (default: the one apt uses on this host)")
    args = parser.parse_args(argv)
    from rlkit.sandbox.base_image import ensure_base_image

    ensure_base_image(force=args.force, mirror=args.mirror, log=print)
    return 0


def _build(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="rlkit images build")
    parser.add_argument("source", nargs="?", type=Path, default=DEFAULT_TASKS,
                        help="a task dir, a dir of task dirs, or a task index .parquet (default examples/tasks)")
    parser.add_argument("--registry", "--tag-prefix", dest="registry", default=os.environ.get("REGISTRY") or None,
                        help="prefix image names with this registry/path (default $REGISTRY from site.env)")
    parser.add_argument("--push", action="store_true", help="push each built image to --registry")
    parser.add_argument("--force", action="store_true", help="rebuild images even when their sources are unchanged")
    parser.add_argument("--no-base", action="store_true", help="do not ensure rlkit/base:bookworm first")
    parser.add_argument("--scaffold", help="prepare this agent scaffold (cc|ohsdk|oc|terminus): its image and the "
                        "volume every sandbox mounts it from")
    parser.add_argument("--bake", action="store_true", help="with --scaffold: bake the agent on top of each task "
                        "image instead (AGENT_DELIVERY=bake)")
    args = parser.parse_args(argv)
    if args.push and not args.registry:
        from rlkit.errors import UserError

        raise UserError("--push needs a registry", key="REGISTRY", fix="set REGISTRY in site.env or pass --registry")

    from rlkit.sandbox.base_image import ensure_base_image
    from rlkit.sandbox.images import FAILED, build_task_images, text_progress
    from rlkit.tasks.images import discover_tasks

    specs = discover_tasks(args.source, registry=args.registry)
    if not args.no_base and any(spec.dockerfile and not spec.prebuilt for spec in specs):
        ensure_base_image(log=lambda msg: print(msg, file=sys.stderr))
    layer = None
    if args.scaffold and not args.bake:
        from rlkit.scaffolds.mount import prepare_agent_mount

        prepare_agent_mount(args.scaffold, push=args.push, log=lambda msg: print(msg, file=sys.stderr))
    elif args.scaffold:
        from rlkit.scaffolds.bake import scaffold_layer

        layer = scaffold_layer(args.scaffold, force=args.force, push=args.push,
                               log=lambda msg: print(msg, file=sys.stderr))
    outcomes = build_task_images(specs, push=args.push, force=args.force,
                                 progress=text_progress(), layer=layer)
    width = max((len(o.task_id) for o in outcomes), default=0)
    for o in outcomes:
        mark = "✗" if o.status in FAILED else "✓"
        print(f"{mark} {o.task_id.ljust(width)}  {o.status:<8} {o.image}" + (f"\n    {o.detail}" if o.detail else ""))
    failed = [o for o in outcomes if o.status in FAILED]
    print(f"{len(outcomes) - len(failed)}/{len(outcomes)} images ready")
    return 1 if failed else 0


def _agents(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="rlkit images agents")
    parser.add_argument("names", nargs="*", help="agents (default: every scaffold baked into images)")
    parser.add_argument("--force", action="store_true", help="rebuild even when the image exists")
    args = parser.parse_args(argv)

    from rlkit.sandbox.base_image import ensure_base_image
    from rlkit.scaffolds import SCAFFOLDS, get_scaffold
    from rlkit.scaffolds.bake import build_agent_image

    args.names = args.names or [n for n in SCAFFOLDS.names() if get_scaffold(n).image_recipe is not None]

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    if "ohsdk" in args.names:
        ensure_base_image(log=log)  # the ohsdk agent is built on it
    for name in args.names:
        print(build_agent_image(name, force=args.force, log=log), flush=True)
    return 0


def main(argv: list[str]) -> int:
    if not argv or argv[0] in {"-h", "--help"}:
        print(__doc__)
        return 0 if argv else 2
    commands = {"dockerd": _dockerd, "base": _base, "build": _build, "agents": _agents}
    if argv[0] not in commands:
        print(f"rlkit images: unknown sub-command {argv[0]!r}\n{__doc__}", file=sys.stderr)
        return 2
    return commands[argv[0]](argv[1:])
