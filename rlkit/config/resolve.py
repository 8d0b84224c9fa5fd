"""Layered resolution: default < site.env < axis modules < run config < process switches < overrides.

The result keeps, for every key, its final value, the layer and file:line it came
from, and everything that went wrong on the way (parse errors, unknown keys, keys set
in a layer they do not belong to, bad references, bad types) as data. Checks turn
those into findings; nothing here prints or exits.

Relative paths resolve against the project root: the nearest ancestor of the config
file (else of the current directory) that holds `scripts/templates/`; failing both,
the current directory.

Overrides (keyword arguments of the Python API, `--set KEY=VALUE`) are the top layer: read as run
config lines (rlkit.config.overrides), they may set any key of the run or process layer, and an
axis key among them picks its axis module as a run config's would.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from rlkit.config.envfile import REF_RE, Entry, EnvFile, read_env_file
from rlkit.config.files import clip
from rlkit.config.overrides import as_text, override_entries
from rlkit.config.paths import RunPaths
from rlkit.config.schema import (
    AXIS_KEYS,
    FIELDS,
    KEYS,
    PROCESS_KEYS,
    Layer,
    RunConfig,
    default_text,
    is_path,
    is_secret,
    is_strict,
    key_layers,
)
from rlkit.config.secrets import (
    MASK,
    candidate_values,
    environment_secrets,
    is_secret_name,
    mask_secrets,
    remember,
)
from rlkit.errors import ConfigError

PACKAGE_ROOT = Path(__file__).resolve().parents[2]
CHANGEME = "CHANGEME"
SECRET_KEYS = frozenset(k for k in KEYS if is_secret(k))
MAX_EXPANDED = 65536  # characters a ${KEY} expansion may grow to (A=${B}${B}, B=${C}${C}, ... doubles)


@dataclass(frozen=True)
class Value:
    key: str
    text: str  # final text after ${KEY} expansion
    layer: Layer
    where: str  # file:line, "built-in" or "environment"
    raw: str = ""  # as written, before expansion

    @property
    def secret(self) -> bool:
        return is_secret(self.key)


@dataclass(frozen=True)
class Misplaced:
    entry: Entry
    layer: Layer


@dataclass(frozen=True)
class Override:
    """A value set in one file that a later layer (or a later file of the same layer) replaced."""

    key: str
    earlier: Value
    later: Value


@dataclass
class ResolvedConfig:
    config_path: Path
    root: Path
    values: dict[str, Value]
    config: RunConfig
    layer_files: dict[Layer, list[str]] = field(default_factory=dict)
    unknown: list[tuple[Entry, Layer]] = field(default_factory=list)
    misplaced: list[Misplaced] = field(default_factory=list)
    replaced: list[Override] = field(default_factory=list)  # values a later layer replaced
    errors: list[ConfigError] = field(default_factory=list)  # parse and reference errors
    type_errors: list[ConfigError] = field(default_factory=list)
    duplicates: list[tuple[Entry, Entry]] = field(default_factory=list)
    bad_keys: set[str] = field(default_factory=set)  # keys that fell back to their default
    env_near_misses: list[tuple[str, str]] = field(default_factory=list)  # (environment name, process key)
    notes: list[ConfigError] = field(default_factory=list)  # harmless oddities of the files (a BOM)
    secrets: set[str] = field(default_factory=set)  # every secret value seen, for masking by value
    overrides: dict[str, str] = field(default_factory=dict)  # the override layer as given (text)
    environ: dict[str, str] | None = field(default=None, repr=False)  # the process environment it was resolved in

    def __repr__(self) -> str:
        """Where it came from and how many values, never a value (the dataclass repr would show every secret)."""
        from rlkit.config.display import clean

        keys = ", ".join(sorted(self.overrides))
        return clean(f"ResolvedConfig(config_path={str(self.config_path)!r}, keys={len(self.values)}, "
                     f"overrides=[{keys}], errors={len(self.errors) + len(self.type_errors)})", secrets=self)

    __str__ = __repr__

    def path(self, key: str) -> Path | None:
        """A path-valued key, absolute (None when empty)."""
        text = str(getattr(self.config, key))
        return resolve_path(text, self.root) if text else None

    def where(self, key: str) -> str:
        return self.values[key].where

    def public_overrides(self) -> dict[str, str]:
        """The overrides that may be written down (a run lock, a command line): secret keys left out."""
        return {k: v for k, v in self.overrides.items() if k not in SECRET_KEYS}

    def secret_overrides(self) -> dict[str, str]:
        """Overridden secret keys: a child process gets them in its environment, never on its command line."""
        return {k: v for k, v in self.overrides.items() if k in SECRET_KEYS}

    def layer(self, key: str) -> Layer:
        """The layer `key`'s value came from (default, site, axis, run, process or override)."""
        return self.values[key].layer

    def run_paths(self) -> RunPaths:
        """Where this run's logs, checkpoints and trials live (OUTPUT_DIR/PROJECT_NAME/EXP_NAME)."""
        c = self.config
        return RunPaths(self.path("OUTPUT_DIR") or self.root, c.PROJECT_NAME or "default", c.EXP_NAME or "default")

    def as_dict(self) -> dict[str, Any]:
        """Every value with its layer and origin, secrets masked (the JSON of `rlkit check --json`)."""
        values = {}
        for name in KEYS:
            v = self.values[name]
            values[name] = {"value": mask_secrets(masked(v), self), "layer": v.layer.value, "where": v.where}
        return {"config": str(self.config_path), "root": str(self.root), "overrides": sorted(self.overrides),
                "values": values}


def resolve_path(text: str, root: Path) -> Path:
    p = Path(os.path.expanduser(text))
    return p if p.is_absolute() else (root / p)


def find_project_root(config_path: Path) -> Path:
    for start in (config_path.resolve().parent, Path.cwd().resolve()):
        for candidate in (start, *start.parents):
            if (candidate / "scripts" / "templates").is_dir():
                return candidate
    return Path.cwd().resolve()


def templates_dir(root: Path) -> Path:
    local = root / "scripts" / "templates"
    return local if local.is_dir() else PACKAGE_ROOT / "scripts" / "templates"


def site_env_path(root: Path, environ: dict[str, str]) -> Path | None:
    explicit = environ.get("RLKIT_SITE_ENV", "")
    if explicit:
        return resolve_path(explicit, Path.cwd())
    default = root / "scripts" / "train" / "site.env"
    return default if default.is_file() else None


def _expand(values: dict[str, Value], literal: set[str], errors: list[ConfigError]) -> dict[str, Value]:
    """Expand ${KEY} across layers; cycles and unknown references are errors."""
    done: dict[str, str] = {}

    def expand(name: str, stack: tuple[str, ...]) -> str:
        if name in done:
            return done[name]
        value = values[name]
        if name in literal:
            done[name] = value.text
            return value.text

        def sub(m) -> str:
            ref = m.group(1)
            if ref in stack or ref == name:
                chain = " -> ".join((*stack, name, ref))
                errors.append(ConfigError(f"circular reference {chain}", fix="break the cycle with a literal value",
                                          key=name, file=_file(value), line=_line(value)))
                return ""
            if ref not in values:
                close = difflib.get_close_matches(ref, KEYS, n=1)
                fix = f"did you mean ${{{close[0]}}}?" if close else "reference a config key (see docs/configuration.md)"
                errors.append(ConfigError(f"${{{ref}}} is not a config key", fix=fix, key=name,
                                          file=_file(value), line=_line(value)))
                return ""
            return expand(ref, (*stack, name))

        text = REF_RE.sub(sub, value.text)
        if len(text) > MAX_EXPANDED:
            errors.append(ConfigError(f"{name} expands to {len(text)} characters (more than {MAX_EXPANDED})",
                                      fix="reference each key once; values are short", key=name,
                                      file=_file(value), line=_line(value)))
            text = text[:MAX_EXPANDED]
        done[name] = text
        return text

    return {name: Value(name, expand(name, ()), v.layer, v.where, raw=v.text) for name, v in values.items()}


def _env_near_misses(environ: dict[str, str]) -> list[tuple[str, str]]:
    """Environment names that look like a misspelt process switch (DRYRUN=1, PREFLIGHT=1)."""
    out = []
    for name in environ:
        if name in PROCESS_KEYS or not name.isupper():
            continue
        close = difflib.get_close_matches(name, PROCESS_KEYS, n=1, cutoff=0.8)
        if close:
            out.append((name, close[0]))
    return out


def _file(value: Value) -> str | None:
    if value.layer is Layer.OVERRIDE:
        return value.where
    return value.where.rsplit(":", 1)[0] if ":" in value.where else None


def _line(value: Value) -> int | None:
    tail = value.where.rsplit(":", 1)[-1]
    return int(tail) if tail.isdigit() else None


def _typed(values: dict[str, Value], errors: list[ConfigError]) -> tuple[RunConfig, set[str]]:
    """Validate types; keys with a bad type (or CHANGEME) fall back to their default so later checks still run."""
    data = {k: v.text for k, v in values.items()}
    bad = {k for k, v in data.items() if CHANGEME in v}
    while True:  # each round only grows `bad`, so this ends
        attempt = {k: (_default_value(k, data, bad) if k in bad else v) for k, v in data.items()}
        try:
            return RunConfig.model_validate(attempt), bad
        except ValidationError as exc:
            grew = False
            for err in exc.errors():
                name = str(err["loc"][0]) if err["loc"] else ""
                if name not in values or name in bad:
                    continue
                bad.add(name)
                grew = True
                v = values[name]
                if v.layer is Layer.DEFAULT:
                    continue  # a default that inherits a bad value (${TRAIN_BSZ}): the cause is reported
                want = FIELDS[name].annotation
                kind = getattr(want, "__name__", str(want))
                shown = "(a secret, not shown)" if v.secret else clip(repr(v.text), 80)
                msg = str(err["msg"])
                if msg.startswith("Value error, "):  # a range rule (rlkit/config/ranges.py)
                    message, fix = f"{name}={shown} {msg.removeprefix('Value error, ')}", _range_fix(name)
                else:
                    message, fix = f"{name}={shown} is not a valid {kind}: {clip(msg, 120)}", _type_fix(name)
                errors.append(ConfigError(message, fix=fix, key=name, file=_file(v), line=_line(v)))
            if not grew:
                raise ConfigError(f"built-in defaults do not validate: {exc}", fix="report this as an rlkit bug")


def _default_value(name: str, data: dict[str, str], bad: set[str]) -> str:
    """The default, with ${KEY} taken from the config unless that key is bad too."""
    text = default_text(name)
    return REF_RE.sub(lambda m: _default_value(m.group(1), data, bad) if m.group(1) in bad
                      else data.get(m.group(1), ""), text)


def _range_fix(name: str) -> str:
    from rlkit.config.schema import key_rule

    rule = key_rule(name)
    if rule is None:
        return f"fix {name}"
    why = f" ({rule.why})" if rule.why else ""
    return f"set {name} within its range: {rule.text()}{why}"


def _type_fix(name: str) -> str:
    from rlkit.config.schema import type_name

    kind = type_name(name)
    if "|" in kind:
        return f"use one of: {kind}"
    return {"int": "write a whole number", "float": "write a number", "bool": "write 1 or 0"}.get(
        kind, f"write a {kind}")


def resolve(config_path: str | Path, environ: Mapping[str, str] | None = None, *,
            overrides: Mapping[str, object] | None = None) -> ResolvedConfig:
    """Resolve a run config through all layers, `overrides` on top. Raises ConfigError only when the
    run config cannot be read; every other problem is data for the checks."""
    environ = dict(os.environ if environ is None else environ)
    path = Path(config_path)
    run_file = read_env_file(path, secret_keys=SECRET_KEYS)
    override_file = override_entries(overrides or {}, SECRET_KEYS)
    root = find_project_root(path)
    site_path = site_env_path(root, environ)
    site_file = read_env_file(site_path, secret_keys=SECRET_KEYS) if site_path else EnvFile(path="")

    values: dict[str, Value] = {k: Value(k, default_text(k), Layer.DEFAULT, "built-in") for k in KEYS}
    literal: set[str] = set()
    rejected: dict[str, str] = {}  # keys whose line was rejected: not "empty", but unreadable
    out = ResolvedConfig(config_path=path, root=root, values=values, config=RunConfig(), environ=environ,
                         overrides={k: as_text(v) for k, v in (overrides or {}).items()})
    out.layer_files = {Layer.SITE: [str(site_path)] if site_path else [], Layer.RUN: [str(path)]}

    def apply(env: EnvFile, layer: Layer) -> None:
        out.errors.extend(env.errors)
        out.duplicates.extend(env.duplicates)
        out.notes.extend(env.notes)
        for key, raw in env.rejected:
            rejected[key] = raw
            if key in SECRET_KEYS or is_secret_name(key):
                out.secrets.update(candidate_values(raw))
        for entry in env.entries:
            if is_secret_name(entry.key):  # HF_TOKEN in a config: unknown, and still never shown
                out.secrets.update((entry.value, *candidate_values(entry.value)))
            if entry.key not in FIELDS:
                out.unknown.append((entry, layer))
                continue
            allowed = key_layers(entry.key)
            if layer is Layer.OVERRIDE:  # an override stands in for a run config line or the environment
                if Layer.RUN not in allowed and Layer.PROCESS not in allowed:
                    out.misplaced.append(Misplaced(entry, layer))
                    if is_strict(entry.key):
                        continue  # who runs what is never taken from another layer, an override's either
            elif layer not in allowed:
                out.misplaced.append(Misplaced(entry, layer))
                if is_strict(entry.key):
                    continue  # who runs what (agent, image, network) is never taken from another layer
            new = Value(entry.key, entry.value, layer, entry.where)
            old = values[entry.key]
            if old.layer is not Layer.DEFAULT and old.text != new.text:
                out.replaced.append(Override(entry.key, old, new))
            values[entry.key] = new
            literal.discard(entry.key)
            if entry.literal:
                literal.add(entry.key)

    apply(site_file, Layer.SITE)
    # The axis values pick the modules; they come from the layers above and below the axis layer.
    pre = dict(values)
    for layer, env in ((Layer.RUN, run_file), (Layer.OVERRIDE, override_file)):
        for entry in env.entries:
            if entry.key in AXIS_KEYS:
                pre[entry.key] = Value(entry.key, entry.value, layer, entry.where)
    tdir = templates_dir(root)
    axis_files: list[str] = []
    for axis_key, folder in AXIS_KEYS.items():
        axis_value = pre[axis_key].text
        if axis_value not in {m.value for m in FIELDS[axis_key].annotation}:  # type: ignore[union-attr]
            continue  # never a path from an unchecked value; the types check reports it
        module = tdir / folder / f"{axis_value}.env"
        if module.is_file():
            shown = str(module.relative_to(root)) if module.is_relative_to(root) else str(module)
            env = read_env_file(module, display=shown, secret_keys=SECRET_KEYS)
            axis_files.append(shown)
            apply(env, Layer.AXIS)
    out.layer_files[Layer.AXIS] = axis_files
    apply(run_file, Layer.RUN)
    for name in PROCESS_KEYS:
        if name in environ:
            new = Value(name, environ[name], Layer.PROCESS, "environment")
            if values[name].layer is not Layer.DEFAULT and values[name].text != new.text:
                out.replaced.append(Override(name, values[name], new))
            values[name] = new
            literal.add(name)  # the environment is taken as is, never expanded
    apply(override_file, Layer.OVERRIDE)

    out.env_near_misses = _env_near_misses(environ)
    out.values = _expand(values, literal, out.errors)
    out.config, out.bad_keys = _typed(out.values, out.type_errors)
    # A rejected line leaves its key at the default: checks must not call it "empty" as well.
    out.bad_keys |= {k for k in rejected if k in FIELDS and values[k].layer is Layer.DEFAULT}
    for name in SECRET_KEYS:
        out.secrets |= {values[name].text, out.values[name].text}
    out.secrets |= environment_secrets(environ)  # HF_TOKEN, OPENAI_API_KEY, ... of the environment
    out.secrets.discard("")
    remember(out.secrets, environ)  # every message of this process masks them from now on
    return out


def masked(value: Value) -> str:
    """A secret's value is never shown, not even in part: only that it is set."""
    return MASK if value.secret and value.text else value.text


def render_block(resolved: ResolvedConfig) -> str:
    """The run configuration block: every value, its layer and where it came from; secrets masked."""
    width = max(map(len, KEYS))
    lines = [f"Run configuration ({resolved.config_path}; project root {resolved.root})"]
    for name in KEYS:
        v = resolved.values[name]
        shown = masked(v)
        if is_path(name) and shown and not v.secret and name not in resolved.bad_keys:
            shown = str(resolve_path(shown, resolved.root))
        shown = clip(shown.encode("unicode_escape").decode("ascii") if not shown.isprintable() else shown, 120)
        origin = v.layer.value if v.layer in (Layer.DEFAULT, Layer.OVERRIDE) else f"{v.layer.value:<7} {v.where}"
        lines.append(f"  {name.ljust(width)} = {shown or '(empty)':<40} [{origin}]")
    return mask_secrets("\n".join(lines), resolved)  # a value that embeds a secret: masked here too
