"""`rlkit cleanup [--project P] [--experiment E] [--all] [--dry-run]`.

Removes every labelled sandbox (docker containers; k8s pods when a cluster is
configured). `--all` also stops stale Ray and kills our processes still holding the
proxy port. Prints "nothing to clean" when there is nothing left.
"""

from __future__ import annotations

import argparse

from rlkit.config.schema import DEFAULT_PROXY_PORT


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="rlkit cleanup", description=__doc__.splitlines()[0])
    parser.add_argument("--project", help="only sandboxes of this project (label rlkit.project)")
    parser.add_argument("--experiment", help="only sandboxes of this experiment (label rlkit.experiment)")
    parser.add_argument("--all", action="store_true",
                        help="every project, plus stale Ray and processes holding the proxy port")
    parser.add_argument("--dry-run", action="store_true", help="list what would be removed; remove nothing")
    parser.add_argument("--port", type=int, default=DEFAULT_PROXY_PORT,
                        help=f"proxy port to free with --all (default {DEFAULT_PROXY_PORT})")
    parser.add_argument("--no-k8s", action="store_true", help="skip kubernetes even when a cluster is configured")
    parser.add_argument("--namespace", help="kubernetes namespace of the pods (default $RLKIT_K8S_NAMESPACE or rlkit)")
    args = parser.parse_args(argv)

    from rlkit.ops.cleanup import cleanup

    project = None if args.all else args.project
    experiment = None if args.all else args.experiment
    report = cleanup(project, experiment, dry_run=args.dry_run, k8s=False if args.no_k8s else None,
                     processes=args.all, port=args.port, namespace=args.namespace, log=print)
    return 1 if report.errors else 0
