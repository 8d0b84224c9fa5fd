"""`rlkit dashboard [CFG|DIR]` (also webui/start_dashboard.sh, /rl:dashboard): curves and the trajectory browser.

Serves the folder holding logs/ and harbor_trials/ (a run config's OUTPUT_DIR, a folder, or
the current one) on DASHBOARD_PORT (8090), on 127.0.0.1 only. `--public` binds every address
and needs a token (--token, RLKIT_DASHBOARD_TOKEN, or one made up and printed): use it for a
tunnel too, since a tunnel's requests arrive from localhost.
"""

from __future__ import annotations

import argparse
import os
import secrets
from pathlib import Path

DEFAULT_PORT = 8090


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="rlkit dashboard", description=__doc__.splitlines()[0])
    parser.add_argument("target", nargs="?", help="run config (.env) or folder with logs/ (default: .)")
    parser.add_argument("--port", type=int, help=f"port (default: DASHBOARD_PORT of the config, else {DEFAULT_PORT})")
    parser.add_argument("--host", default=None, help="address to bind (default 127.0.0.1; others need a token)")
    parser.add_argument("--public", action="store_true", help="bind 0.0.0.0 with a token (for a tunnel too)")
    parser.add_argument("--token", default=os.environ.get("RLKIT_DASHBOARD_TOKEN") or None,
                        help="access token (default: $RLKIT_DASHBOARD_TOKEN)")
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse(argv)
    from rlkit.errors import UserError
    from rlkit.monitor.dashboard import is_loopback, serve

    root, port = Path.cwd(), args.port
    if args.target and (args.target.endswith(".env") or Path(args.target).is_file()):
        from rlkit.config.resolve import resolve

        resolved = resolve(args.target)
        root = resolved.path("OUTPUT_DIR") or resolved.root
        port = port or resolved.config.DASHBOARD_PORT
    elif args.target:
        root = Path(args.target)
    if not (root / "logs").is_dir() and not (root / "harbor_trials").is_dir():
        raise UserError(f"{root} holds no logs/ or harbor_trials/", fix="pass a run config or the run's OUTPUT_DIR")
    port = port or DEFAULT_PORT
    host = args.host or ("0.0.0.0" if args.public else "127.0.0.1")
    token = args.token
    if args.public and not token:
        token = secrets.token_urlsafe(24)
    if not is_loopback(host) and not token:
        raise UserError(f"--host {host} exposes the dashboard beyond this machine without a token",
                        fix="add --token T (or RLKIT_DASHBOARD_TOKEN), or use --public, which makes one up")
    shown = "127.0.0.1" if host in {"0.0.0.0", "::"} else host
    print(f"rlkit dashboard on http://{shown}:{port}/" + (f"?token={token}" if token else "") + f"   (serving {root})",
          flush=True)
    serve(root, host=host, port=port, token=token)
    return 0
