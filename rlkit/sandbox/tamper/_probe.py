"""The probe that runs once per image, in a sandbox nothing has touched yet.

It prints tab-separated records (one per line) that `profile.parse_probe` reads:

    W  <working dir>                 V  <PATH>
    D  <PATH entry>  <real path>     T  <tool>  <absolute path found on PATH>
    U  <user>  <uid>  <home>         B  <library dir (real path)>
    N  <command>  <interpreter>      I  <command>  <that interpreter's facts, JSON>
    E  <dir>  <name>  <kind>         C  <dir>/<namespace>  <child>  <kind>
    L  <path>  <link target>

Kinds: f file, d folder, p package (a folder with an `__init__`), l symlink. The shell part
needs only POSIX sh (plus readlink, all unmodified at this point); each Python interpreter on
PATH describes its own import path and lists those folders itself, writing no bytecode: the
probe leaves nothing in the sandbox but an emptied /tmp folder.
"""

from __future__ import annotations

# Runs under every interpreter on PATH (any CPython >= 3.6): one I record, then E/C/L records
# for the folders on its import path. PYTHONNOUSERSITE keeps the user site out of sys.path
# (it is reported separately, relative to a home).
PYTHON_PART = r'''
import json, os, sys
T = "\t"
def out(*f):
    if not any(("\t" in x or "\n" in x) for x in f):
        print(T.join(f))
r = {"exe": os.path.realpath(sys.executable), "version": "%d.%d" % sys.version_info[:2],
     "cache_tag": getattr(sys.implementation, "cache_tag", None) or "",
     "sys_path": [os.path.realpath(p) for p in sys.path if p],
     "builtins": sorted(sys.builtin_module_names)}
try:
    import importlib.machinery as m
    r["suffixes"] = list(m.SOURCE_SUFFIXES) + list(m.BYTECODE_SUFFIXES) + list(m.EXTENSION_SUFFIXES)
except Exception:
    r["suffixes"] = [".py", ".pyc", ".so"]
try:
    import site
    r["site_dirs"] = [os.path.realpath(p) for p in site.getsitepackages()]
    r["user_site"] = os.path.relpath(site.getusersitepackages(), os.path.expanduser("~"))
except Exception:
    r["site_dirs"], r["user_site"] = [], ""
try:
    import sysconfig
    paths = sysconfig.get_paths()
    r["stdlib"] = sorted({os.path.realpath(paths["stdlib"]), os.path.realpath(paths["platstdlib"])})
except Exception:
    r["stdlib"] = []
try:
    from importlib.metadata import entry_points
    eps = entry_points()
    group = eps.select(group="pytest11") if hasattr(eps, "select") else eps.get("pytest11", [])
    r["pytest_plugins"] = sorted("%s = %s" % (e.name, e.value) for e in group)
except Exception:
    r["pytest_plugins"] = []
r["prefix"] = os.path.realpath(sys.prefix)
# The test runner's own imports: what a module beside the grader's script must not shadow.
r["runner_modules"] = []
try:
    import contextlib, io, tempfile
    with tempfile.TemporaryDirectory() as tmp:
        with open(os.path.join(tmp, "test_probe.py"), "w") as f:
            f.write("def test_probe():\n    assert True\n")
        sink = io.StringIO()
        with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
            import pytest
            pytest.main(["-q", "-p", "no:cacheprovider", "-p", "no:randomly", os.path.join(tmp, "test_probe.py")])
except BaseException:
    pass
r["runner_modules"] = sorted({m.split(".")[0] for m in list(sys.modules)} - {"__main__", "test_probe"})
print("I" + T + sys.argv[1] + T + json.dumps(r))

def hops(path):
    for _ in range(40):
        if not os.path.islink(path):
            return
        target = os.readlink(path)
        out("L", path, target)
        path = os.path.normpath(os.path.join(os.path.dirname(path), target))

def ancestors(path):
    parts = path.split("/")
    for i in range(2, len(parts) + 1):
        hops("/".join(parts[:i]))

def kind(path):
    if os.path.islink(path):
        return "l"
    if os.path.isdir(path):
        try:
            names = os.listdir(path)
        except OSError:
            return "d"
        return "p" if any(n.split(".")[0] == "__init__" for n in names) else "d"
    return "f"

home = os.path.expanduser("~")
dirs = list(r["sys_path"]) + list(r["site_dirs"])
for d in dict.fromkeys(dirs):
    ancestors(d)
    try:
        names = sorted(os.listdir(d))
    except OSError:
        continue
    for name in names:
        full = os.path.join(d, name)
        k = kind(full)
        out("E", d, name, k)
        if k == "l":
            hops(full)
        elif k == "d" and name.isidentifier():
            try:
                children = sorted(os.listdir(full))[:2000]
            except OSError:
                children = []
            for child in children:
                out("C", full, child, kind(os.path.join(full, child)))
'''

# Interpreters named by absolute path in the shebang of a script on PATH (a tool's own venv,
# e.g. a pytest installed with `uv tool install`), one per line; run by the first python found.
SCAN_PART = r'''
import os, sys
found = set()
for d in sys.argv[1:]:
    try:
        names = os.listdir(d)
    except OSError:
        continue
    for name in names:
        try:
            with open(os.path.join(d, name), "rb") as f:
                head = f.read(256)
        except OSError:
            continue
        if head.startswith(b"#!"):
            words = head[2:].split(b"\n")[0].split()
            if words and words[0].startswith(b"/") and b"python" in words[0].rsplit(b"/", 1)[-1]:
                found.add(words[0].decode("utf-8", "replace"))
for path in sorted(found):
    if "\t" not in path and " " not in path:
        print(path)
'''

# The shell part. $1 is the Python part, $2 the shebang scan. Names with tabs or newlines are skipped (never an image's).
SHELL_PART = r'''
tab=$(printf '\t')
rec() { printf '%s\n' "$*"; }
real() { (cd "$1" 2>/dev/null && pwd -P); }
links_above() {
  p=""
  for part in $(printf '%s' "$1" | tr '/' ' '); do
    p="$p/$part"
    if [ -L "$p" ]; then rec "L$tab$p$tab$(readlink "$p")"; fi
  done
}
follow() {
  p=$1; n=0
  while [ -L "$p" ] && [ $n -lt 40 ]; do
    t=$(readlink "$p"); rec "L$tab$p$tab$t"; n=$((n + 1))
    case $t in /*) p=$t ;; *) p=${p%/*}/$t ;; esac
  done
}
index() {
  d=$1
  for e in "$d"/* "$d"/.[!.]* "$d"/..?*; do
    [ -e "$e" ] || [ -L "$e" ] || continue
    n=${e##*/}
    if [ -L "$e" ]; then
      k=l; t=$(readlink "$e")
      case $t in */*) follow "$e" ;; *) rec "L$tab$e$tab$t" ;; esac
    elif [ -d "$e" ]; then k=d
    else k=f
    fi
    rec "E$tab$d$tab$n$tab$k"
  done
}
py_part=$1
scan_part=$2
rec "W$tab$(pwd)"
rec "V$tab$PATH"
seen=" "
old_ifs=$IFS; IFS=:; set -- $PATH; IFS=$old_ifs
dirs=""
for d in "$@"; do
  r=$(real "$d") || continue
  rec "D$tab$d$tab$r"
  links_above "$d"
  case $seen in *" $r "*) continue ;; esac
  seen="$seen$r "; dirs="$dirs $r"
done
for tool in bash sh rm mkdir chmod tar base64 head cat mktemp ldconfig runuser setpriv find; do
  p=$(command -v "$tool" 2>/dev/null) || continue
  case $p in /*) rec "T$tab$tool$tab$p"; follow "$p" ;; esac
done
while IFS=: read -r name _pw uid _gid _gecos home _shell; do
  rec "U$tab$name$tab$uid$tab$home"
done < /etc/passwd
libs="/lib /usr/lib /lib64 /usr/lib64"
for f in /etc/ld.so.conf /etc/ld.so.conf.d/*.conf; do
  [ -f "$f" ] || continue
  while read -r first _rest; do
    case $first in include|'#'*|'') ;; *) libs="$libs $first" ;; esac
  done < "$f"
done
for d in $libs; do
  r=$(real "$d") || continue
  links_above "$d"
  rec "B$tab$r"
  case $seen in *" $r "*) continue ;; esac
  seen="$seen$r "; dirs="$dirs $r"
done
w=$(pwd -P)
case $seen in *" $w "*) ;; *) dirs="$dirs $w" ;; esac
for d in $dirs; do index "$d"; done
# One run per (folder, interpreter): a venv's bin/python is the system binary with another sys.path.
pys=" "
first=""
describe() {
  py=$1
  exe=$(readlink -f "$py" 2>/dev/null || printf '%s' "$py")
  rec "N$tab$py$tab$exe"
  case $pys in *" ${py%/*}:$exe "*) return ;; esac
  pys="$pys${py%/*}:$exe "
  [ -n "$first" ] || first=$py
  (cd / && PYTHONNOUSERSITE=1 PYTHONDONTWRITEBYTECODE=1 "$py" -c "$py_part" "$py" 2>/dev/null)
}
for d in $dirs; do
  for e in "$d"/python "$d"/python[0-9] "$d"/python[0-9].[0-9] "$d"/python[0-9].[0-9][0-9]; do
    [ -x "$e" ] && [ ! -d "$e" ] || continue
    describe "$e"
  done
done
if [ -n "$first" ]; then
  for e in $(PYTHONDONTWRITEBYTECODE=1 "$first" -c "$scan_part" $dirs 2>/dev/null); do
    [ -x "$e" ] && [ ! -d "$e" ] && describe "$e"
  done
fi
true
'''


def probe_command() -> str:
    """The command a sandbox runs (as root, in its image's own environment) to describe its image."""
    import shlex

    return f"sh -c {shlex.quote(SHELL_PART)} probe {shlex.quote(PYTHON_PART)} {shlex.quote(SCAN_PART)}"
