"""`rlkit cleanup [CFG] [--experiment E [--force]] [--other-users] [--dry-run]`.

Removes what dead runs left behind, and only that: your sandboxes whose owner process is gone
(docker containers; k8s pods when a cluster is configured), rlkit's orphaned vLLM / proxy /
litellm / dashboard / Ray processes, stale leftovers on disk (vLLM IPC sockets and scratch
folders, dead Ray sessions, torch inductor caches, aborted base-image builds) and the locks of
runs whose trainer and reaper both died. A live run's sandboxes are kept
unless you name it (--experiment) and pass --force; other users' are listed, never removed,
unless --other-users; sandboxes with no owner uid are listed, and removed only when their run is
named. Ownership is your real uid, never $USER. With a project (--project, or CFG's PROJECT_NAME)
everything is scoped to that project's runs: processes whose owner environment names it, and
leftovers its dead runs' locks or processes name; without one, everything of yours. With CFG its
OUTPUT_DIR (run locks), PROXY_PORT, DASHBOARD_PORT and RAY_PORT are used. Prints "nothing to
clean" when there is nothing left.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from rlkit.cli._args import add_json_flag, add_set_flag, config_of, print_json
from rlkit.config.schema import DEFAULT_PROXY_PORT


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="rlkit cleanup", description=__doc__.splitlines()[0])
    parser.add_argument("config", nargs="?", help="run config (.env): its OUTPUT_DIR, ports, project")
    parser.add_argument("--project", help="only this project's runs: sandboxes (label rlkit.project), processes, leftovers")
    parser.add_argument("--experiment", "--run", help="only sandboxes of this run (label rlkit.experiment)")
    parser.add_argument("--force", action="store_true", help="with --experiment: also a LIVE run's sandboxes")
    parser.add_argument("--other-users", action="store_true",
                        help="also other users' orphaned sandboxes (live ones only with --experiment --force)")
    parser.add_argument("--sandboxes-only", action="store_true", help="leave processes and /tmp alone")
    parser.add_argument("--all", action="store_true", help=argparse.SUPPRESS)  # old spelling: same as default
    parser.add_argument("--dry-run", action="store_true", help="list what would be removed; remove nothing")
    parser.add_argument("--port", type=int, action="append", default=[],
                        help=f"port(s) to report holders of (default: the config's, else {DEFAULT_PROXY_PORT})")
    parser.add_argument("--output-dir", type=Path, help="where run locks live (default: the config's OUTPUT_DIR, "
                        "else the current directory)")
    parser.add_argument("--no-k8s", action="store_true", help="skip kubernetes even when a cluster is configured")
    parser.add_argument("--namespace", help="kubernetes namespace of the pods (default $RLKIT_K8S_NAMESPACE or rlkit)")
    add_set_flag(parser)
    add_json_flag(parser)
    args = parser.parse_args(argv)
    if args.force and not args.experiment:
        parser.error("--force needs --experiment RUN: a live run's sandboxes go only when you name the run")

    from rlkit import api
    from rlkit.ops.cleanup import render

    report = api.cleanup(config_of(args), project=args.project, experiment=args.experiment, force=args.force,
                         other_users=args.other_users, sandboxes_only=args.sandboxes_only, dry_run=args.dry_run,
                         ports=args.port, output_dir=args.output_dir, k8s=False if args.no_k8s else None,
                         namespace=args.namespace)
    if args.json:
        print_json(report)
    else:
        render(report, print)
    return 1 if report.errors else 0
