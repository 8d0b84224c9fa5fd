"""In-memory tar helpers shared by the docker (put/get_archive) and k8s (tar over exec) backends."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path, PurePosixPath


def _rel(path: str | PurePosixPath) -> str:
    return str(PurePosixPath(path)).lstrip("/")


def pack_file(source: Path, target_path: str) -> bytes:
    """A tar holding `source` at `target_path` (relative to /); parents are created on extract."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        tar.add(str(source), arcname=_rel(target_path), recursive=False)
    return buf.getvalue()


def pack_dir(source: Path, target_dir: str) -> bytes:
    """A tar of the contents of `source` placed under `target_dir` (like `cp -r source/. target`)."""
    buf = io.BytesIO()
    base = _rel(target_dir)
    children = sorted(source.rglob("*"))
    with tarfile.open(fileobj=buf, mode="w") as tar:
        if not children:
            # Only an empty source needs the target's own entry; otherwise extraction makes
            # it, and an entry would reset the mode of an existing target (/tmp, /logs/...).
            info = tarfile.TarInfo(base)
            info.type = tarfile.DIRTYPE
            info.mode = 0o755
            tar.addfile(info)
        for path in children:
            tar.add(str(path), arcname=f"{base}/{path.relative_to(source).as_posix()}", recursive=False)
    return buf.getvalue()


def _safe_filter(member: tarfile.TarInfo, dest: str) -> tarfile.TarInfo | None:
    """tarfile's data filter, but skipping (not failing on) what it rejects: device nodes,
    FIFOs and links out of the destination an agent may leave in its log dirs."""
    if member.isdev():
        return None
    try:
        return tarfile.data_filter(member, dest)
    except tarfile.FilterError:
        return None


def extract_single_file(data: bytes, target_path: Path) -> None:
    """Write the one regular file in tar `data` to `target_path`."""
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        for member in tar:
            if member.isfile():
                fileobj = tar.extractfile(member)
                assert fileobj is not None
                target_path.parent.mkdir(parents=True, exist_ok=True)
                target_path.write_bytes(fileobj.read())
                return
    raise FileNotFoundError(f"no regular file in archive for {target_path}")


def extract_dir(data: bytes, target_dir: Path, strip_top: bool) -> None:
    """Extract tar `data` into `target_dir`; `strip_top` drops the archive's top directory
    (docker's get_archive of /a/b yields entries `b/...`)."""
    target_dir.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        members = []
        for member in tar.getmembers():
            if strip_top:
                parts = PurePosixPath(member.name).parts
                if len(parts) <= 1:
                    continue
                member.name = str(PurePosixPath(*parts[1:]))
            members.append(member)
        tar.extractall(path=target_dir, members=members, filter=_safe_filter)
