"""scripts/uv_args.py: pip's package sources (config files and PIP_* variables) as uv flags."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.fixtures.scripts import load_script

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "uv_args.py"
uv_args = load_script("scripts/uv_args.py")

LISTING = """global.cert='/etc/ssl/certs/ca-certificates.crt'
global.constraint='/etc/xdg/pip/constraints.txt'
global.extra-index-url='file:///opt/pypi/simple file:///opt/pypi-more/simple'
global.find-links='/opt/wheels'
install.find-links='/from/install/section'
:env:.find-links='/from/env'
"""


def test_the_env_wins_over_install_over_global_and_lists_split() -> None:
    settings = uv_args.pip_settings(LISTING)
    assert settings["find-links"] == "/from/env"
    assert settings["cert"] == "/etc/ssl/certs/ca-certificates.crt"
    assert uv_args.uv_args(settings) == [
        "--extra-index-url", "file:///opt/pypi/simple", "--extra-index-url", "file:///opt/pypi-more/simple",
        "--find-links", "/from/env", "--constraints", "/etc/xdg/pip/constraints.txt",
        "--index-strategy", "unsafe-best-match"]


def test_no_pip_sources_give_no_flags_and_no_index_is_kept() -> None:
    assert uv_args.uv_args(uv_args.pip_settings("")) == []
    settings = uv_args.pip_settings("global.no-index='true'\nglobal.index-url='https://mirror.example/simple'")
    assert uv_args.uv_args(settings) == ["--index-url", "https://mirror.example/simple", "--no-index",
                                         "--index-strategy", "unsafe-best-match"]


def test_the_script_reads_pips_own_configuration(tmp_path: Path) -> None:
    conf = tmp_path / "pip.conf"
    conf.write_text("[global]\nextra-index-url = https://one.example/simple https://two.example/simple\n")
    env = {**os.environ, "PIP_CONFIG_FILE": str(conf), "PIP_FIND_LINKS": str(tmp_path), "PIP_CERT": "/ca.pem"}
    out = subprocess.run([sys.executable, str(SCRIPT)], env=env, capture_output=True, text=True, check=True).stdout
    flags = out.split()
    assert flags[flags.index("--find-links") + 1] == str(tmp_path)
    assert "https://two.example/simple" in flags
    cert = subprocess.run([sys.executable, str(SCRIPT), "--cert"], env=env, capture_output=True, text=True,
                          check=True).stdout.strip()
    assert cert == "/ca.pem"
