"""Static checks: they read only the resolved config, never the world.

Topology (documented in docs/configuration.md):
  sync            rollout is colocated on the training GPUs: N_NODES_ROLLOUT = 0 and
                  N_NODES_TRAIN = NNODES. verl trainer_mode sync (or colocate_async).
  async           rollout runs on its own nodes (verl separate_async):
                  NNODES = N_NODES_TRAIN + N_NODES_ROLLOUT with both >= 1.
"""

from __future__ import annotations

import difflib
import os
import re
from pathlib import Path

from rlkit.config.files import FileReadError, read_bytes
from rlkit.config.resolve import CHANGEME
from rlkit.config.schema import (
    KEYS,
    Algorithm,
    Layer,
    TrainingMode,
    VerlTrainerMode,
    home_layer,
    is_secret,
    is_strict,
    key_layers,
)
from rlkit.config.secrets import secret_values
from rlkit.validate.findings import Context, Finding, fatal, ok, skip, warn

SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
SUGGESTED = 10  # unknown keys given a did-you-mean (difflib per key is slow for 80,000 of them)
DIVISORS_SHOWN = 12


def config_syntax(ctx: Context) -> list[Finding]:
    r = ctx.resolved
    out = [fatal("config_syntax", _with_key(e.key, e.message), e.fix, key=e.key, where=e.where() or None)
           for e in r.errors]
    out += [warn("config_syntax", n.message, n.fix, where=n.where() or None) for n in r.notes]
    for earlier, later in r.duplicates:
        out.append(warn("config_syntax", f"{later.key} is set twice; the later value wins (first at "
                        f"{earlier.where})", "remove one of the lines", key=later.key, where=later.where))
    files = [f for fs in r.layer_files.values() for f in fs]
    return out or [ok("config_syntax", f"{len(files)} file(s) read: {', '.join(files)}")]


def _with_key(key: str | None, message: str) -> str:
    return f"{key}: {message}" if key and key not in message else message


def changeme(ctx: Context) -> list[Finding]:
    found = [v for v in ctx.resolved.values.values() if CHANGEME in v.raw or CHANGEME in v.text]
    if not found:
        return [ok("changeme", "no CHANGEME placeholders")]
    return [fatal("changeme", f"{v.key} is still CHANGEME", f"set {v.key} (see docs/configuration.md)",
                  key=v.key, where=v.where) for v in found]


def unknown_key(ctx: Context) -> list[Finding]:
    out = []
    for i, (entry, layer) in enumerate(ctx.resolved.unknown):
        close = difflib.get_close_matches(entry.key.upper(), KEYS, n=1, cutoff=0.6) if i < SUGGESTED else []
        fix = f"did you mean {close[0]}?" if close else "remove it; docs/configuration.md lists every key"
        out.append(fatal("unknown_key", f"unknown key {entry.key} in the {layer.value} layer", fix,
                         key=entry.key, where=entry.where))
    for name, meant in ctx.resolved.env_near_misses:
        out.append(warn("unknown_key", f"environment variable {name} is not read (only process switches are)",
                        f"did you mean {meant}?", key=name, where="environment"))
    return out or [ok("unknown_key", "every key is known")]


LAYER_FILES = {Layer.SITE: "site.env", Layer.RUN: "the run config", Layer.AXIS: "scripts/templates",
               Layer.PROCESS: "the process environment", Layer.DEFAULT: "the built-in default"}


def key_layer(ctx: Context) -> list[Finding]:
    """A key set outside its layers: a warning, and FATAL for the keys that decide who runs what
    (the agent, the image, the network): a site.env must not pick the agent, nor a run config the registry."""
    out = []
    for m in ctx.resolved.misplaced:
        allowed = ", ".join(layer.value for layer in key_layers(m.entry.key))
        where_to = LAYER_FILES[home_layer(m.entry.key)]
        message = f"{m.entry.key} belongs to the {allowed} layer, but is set in the {m.layer.value} layer"
        if is_strict(m.entry.key):
            out.append(fatal("key_layer", f"{message}; it decides who runs what (the agent, the image or the "
                             "network), so it is not applied from there", f"move it to {where_to}, or remove it",
                             key=m.entry.key, where=m.entry.where))
        else:
            out.append(warn("key_layer", message, f"move it to {where_to}", key=m.entry.key, where=m.entry.where))
    return out or [ok("key_layer", "every key is set in a layer it belongs to")]


def overrides(ctx: Context) -> list[Finding]:
    """Every value a later layer replaced, said: a template replacing a site.env value is a warning (the
    cluster's setting silently lost); the run config or the environment replacing one is listed."""
    out, listed = [], []
    for o in ctx.resolved.replaced:
        was = f"{o.key}={_shown(o.earlier.text, o.key)} ({o.earlier.layer.value}, {o.earlier.where})"
        now = f"{_shown(o.later.text, o.key)} ({o.later.layer.value}, {o.later.where})"
        if o.later.layer is Layer.AXIS:
            out.append(warn("overrides", f"{was} is replaced by the template's {now}", f"to keep the "
                            f"{o.earlier.layer.value} value, set {o.key} in the run config (it wins over templates); "
                            f"else remove it from {LAYER_FILES[o.earlier.layer]}", key=o.key))
        else:
            listed.append(f"{was} -> {now}")
    if listed:
        shown = "; ".join(listed[:6]) + (f"; and {len(listed) - 6} more" if len(listed) > 6 else "")
        out.append(ok("overrides", f"replaced by a later layer: {shown}"))
    return out or [ok("overrides", "no layer replaces a value set in another file")]


def _shown(text: str, key: str) -> str:
    return "****" if is_secret(key) else (repr(text) if text else "(empty)")


def output_dir(ctx: Context) -> list[Finding]:
    """OUTPUT_DIR never climbs out with '..': DRY_RUN writes there, and a run writes logs and checkpoints."""
    r = ctx.resolved
    if "OUTPUT_DIR" in r.bad_keys:
        return [skip("output_dir", "OUTPUT_DIR is not usable (see types)")]
    raw = r.config.OUTPUT_DIR
    if ".." in Path(raw).parts:
        return [fatal("output_dir", f"OUTPUT_DIR={raw!r} climbs out with '..' (to "
                      f"{os.path.normpath(r.path('OUTPUT_DIR') or raw)})", "write a path inside the project, or "
                      "an absolute path without '..'", key="OUTPUT_DIR", where=r.where("OUTPUT_DIR"))]
    return [ok("output_dir", f"artifacts under {r.path('OUTPUT_DIR') or r.root}")]


def secret_spread(ctx: Context) -> list[Finding]:
    """A secret's value inside another key would be printed, logged and written (the agent-loop YAML)."""
    secrets = secret_values(ctx.resolved)
    out = []
    for name, value in ctx.resolved.values.items():
        if is_secret(name) or name in ("PROJECT_NAME", "EXP_NAME") or not value.text:
            continue  # PROJECT_NAME / EXP_NAME: the names check says it
        if any(s in value.text for s in secrets):
            out.append(fatal("secret_spread", f"{name} holds the value of a secret; it would be printed, logged "
                             "and written to the run's files", f"set {name} without ${{...}} of a secret key",
                             key=name, where=value.where))
    return out or [ok("secret_spread", "secret values stay in their own keys")]


def logger(ctx: Context) -> list[Finding]:
    c = ctx.resolved.config
    loggers = c.LOGGER.split(",")
    if "wandb" in loggers and not c.WANDB_API_KEY:
        try:
            netrc = read_bytes(Path.home() / ".netrc")
        except FileReadError:
            netrc = b""
        if b"api.wandb.ai" not in netrc:
            return [warn("logger", "LOGGER includes wandb but WANDB_API_KEY is unset and ~/.netrc has no wandb login",
                         "export WANDB_API_KEY=... before launching (or `wandb login`)", key="WANDB_API_KEY",
                         where=ctx.resolved.where("LOGGER"))]
    if "file" not in loggers:
        return [warn("logger", f"LOGGER={c.LOGGER} has no file logger: step metrics reach disk only through "
                     "the console log", "add file to LOGGER (writes logs/<exp>.jsonl)", key="LOGGER",
                     where=ctx.resolved.where("LOGGER"))]
    return [ok("logger", f"loggers: {c.LOGGER}")]


def types(ctx: Context) -> list[Finding]:
    out = [fatal("types", e.message, e.fix, key=e.key, where=e.where() or None)
           for e in ctx.resolved.type_errors]
    return out or [ok("types", "every value has its declared type")]


def names(ctx: Context) -> list[Finding]:
    c = ctx.resolved.config
    out = []
    for name in ("PROJECT_NAME", "EXP_NAME"):
        value = getattr(c, name)
        where = ctx.resolved.where(name)
        if name in ctx.resolved.bad_keys:
            continue  # reported by changeme / types
        if not value:
            out.append(fatal("names", f"{name} is empty", f"set {name} (letters, digits, . _ -)", key=name,
                             where=where))
        elif any(s in value for s in secret_values(ctx.resolved)):
            out.append(fatal("names", f"{name} holds the value of a secret (it would name directories and logs)",
                             f"set {name} without ${{...}} of a secret key", key=name, where=where))
        elif not SAFE_NAME.fullmatch(value) or value in {".", ".."}:
            out.append(fatal("names", f"{name}={value!r} is not a safe path name", "use letters, digits, '.', "
                             "'_' and '-' only, starting with a letter or digit", key=name, where=where))
    if not out and ctx.resolved.bad_keys & {"PROJECT_NAME", "EXP_NAME"}:
        return [skip("names", "PROJECT_NAME / EXP_NAME not set (see changeme)")]
    return out or [ok("names", f"artifacts go under {c.PROJECT_NAME}/{c.EXP_NAME}")]


def topology(ctx: Context) -> list[Finding]:
    c = ctx.resolved.config
    w = ctx.resolved.where
    if c.NNODES < 1 or c.N_NODES_TRAIN < 1 or c.N_NODES_ROLLOUT < 0:
        return [fatal("topology", f"NNODES={c.NNODES}, N_NODES_TRAIN={c.N_NODES_TRAIN} must be >= 1 and "
                      f"N_NODES_ROLLOUT={c.N_NODES_ROLLOUT} >= 0", "fix the node counts", key="NNODES",
                      where=w("NNODES"))]
    separate = c.VERL_TRAINER_MODE is VerlTrainerMode.SEPARATE_ASYNC
    if c.TRAINING_MODE is TrainingMode.SYNC and separate:
        return [fatal("topology", "TRAINING_MODE=sync but VERL_TRAINER_MODE=separate_async",
                      "remove VERL_TRAINER_MODE from the run config (the mode axis sets it)",
                      key="VERL_TRAINER_MODE", where=w("VERL_TRAINER_MODE"))]
    if not separate and c.N_NODES_ROLLOUT != 0:
        return [fatal("topology", f"{c.VERL_TRAINER_MODE.value} colocates rollout with training, so "
                      f"N_NODES_ROLLOUT must be 0 (got {c.N_NODES_ROLLOUT})",
                      "set N_NODES_ROLLOUT=0 and N_NODES_TRAIN=NNODES, or TRAINING_MODE=async",
                      key="N_NODES_ROLLOUT", where=w("N_NODES_ROLLOUT"))]
    if separate and c.N_NODES_ROLLOUT < 1:
        return [fatal("topology", "async (separate_async) needs dedicated rollout nodes, N_NODES_ROLLOUT=0",
                      "set N_NODES_ROLLOUT >= 1, or VERL_TRAINER_MODE=colocate_async for a one-node async run",
                      key="N_NODES_ROLLOUT", where=w("N_NODES_ROLLOUT"))]
    if c.NNODES != c.N_NODES_TRAIN + c.N_NODES_ROLLOUT:
        return [fatal("topology", f"NNODES={c.NNODES} != N_NODES_TRAIN={c.N_NODES_TRAIN} + "
                      f"N_NODES_ROLLOUT={c.N_NODES_ROLLOUT}",
                      f"set NNODES={c.N_NODES_TRAIN + c.N_NODES_ROLLOUT} or change the split", key="NNODES",
                      where=w("NNODES"))]
    return [ok("topology", f"{c.NNODES} node(s): {c.N_NODES_TRAIN} train + {c.N_NODES_ROLLOUT} rollout "
               f"({c.VERL_TRAINER_MODE.value})")]


def parallelism(ctx: Context) -> list[Finding]:
    c = ctx.resolved.config
    w = ctx.resolved.where
    out = []
    world = c.N_NODES_TRAIN * c.GPUS_PER_NODE
    if c.GPUS_PER_NODE < 1:
        return [fatal("parallelism", "GPUS_PER_NODE must be >= 1", "set GPUS_PER_NODE in site.env",
                      key="GPUS_PER_NODE", where=w("GPUS_PER_NODE"))]
    if c.SP_SIZE < 1 or world % c.SP_SIZE:
        out.append(fatal("parallelism", f"SP_SIZE={c.SP_SIZE} does not divide the training world "
                         f"{c.N_NODES_TRAIN} x {c.GPUS_PER_NODE} = {world}",
                         f"pick a divisor of {world}: {_divisors(world)}", key="SP_SIZE", where=w("SP_SIZE")))
    if c.ROLLOUT_TP < 1 or c.GPUS_PER_NODE % c.ROLLOUT_TP:
        out.append(fatal("parallelism", f"ROLLOUT_TP={c.ROLLOUT_TP} does not divide GPUS_PER_NODE="
                         f"{c.GPUS_PER_NODE}", f"pick one of {_divisors(c.GPUS_PER_NODE)}", key="ROLLOUT_TP",
                         where=w("ROLLOUT_TP")))
    # VeOmni 0.1.11 (verl 0.9.1's pin) builds the EP mesh over the whole world: `world_size % ep_size == 0`
    # (veomni/distributed/parallel_state.py); EP need not divide world / SP.
    if c.EP_SIZE < 1 or world % c.EP_SIZE:
        out.append(fatal("parallelism", f"EP_SIZE={c.EP_SIZE} does not divide the training world {world}",
                         f"pick a divisor of {world}: {_divisors(world)}", key="EP_SIZE", where=w("EP_SIZE")))
    return out or [ok("parallelism", f"train world {world} GPUs, SP {c.SP_SIZE}, rollout TP {c.ROLLOUT_TP}")]


def _divisors(n: int) -> str:
    """The divisors of n, smallest first, the first few of them (pairs up to sqrt(n): no hang for huge n)."""
    if n < 1:
        return "none"
    if n > 10**10:  # 10^5 trial divisions at most
        return f"any divisor of {n}"
    small, large, d = [], [], 1
    while d * d <= n:
        if n % d == 0:
            small.append(d)
            if d != n // d:
                large.append(n // d)
        d += 1
    found = small + large[::-1]
    shown = ", ".join(str(x) for x in found[:DIVISORS_SHOWN])
    return shown + (f", ... ({len(found)} in all, up to {n})" if len(found) > DIVISORS_SHOWN else "")


def batch(ctx: Context) -> list[Finding]:
    c = ctx.resolved.config
    w = ctx.resolved.where
    out = []
    for name in ("TRAIN_BSZ", "N_RESP", "MINI_BSZ", "MAX_PROMPT", "MAX_RESP"):
        if getattr(c, name) < 1:
            out.append(fatal("batch", f"{name} must be >= 1", f"set {name} to a positive number", key=name,
                             where=w(name)))
    if out:
        return out
    dp = c.N_NODES_TRAIN * c.GPUS_PER_NODE // max(c.SP_SIZE, 1)
    if c.TRAIN_BSZ % c.MINI_BSZ:
        out.append(fatal("batch", f"MINI_BSZ={c.MINI_BSZ} does not divide TRAIN_BSZ={c.TRAIN_BSZ}",
                         f"pick a divisor of {c.TRAIN_BSZ}", key="MINI_BSZ", where=w("MINI_BSZ")))
    elif dp > 0 and (c.MINI_BSZ * c.N_RESP) % dp:
        out.append(fatal("batch", f"MINI_BSZ x N_RESP = {c.MINI_BSZ * c.N_RESP} trajectories do not split "
                         f"evenly over the data-parallel world {dp} (train GPUs / SP_SIZE)",
                         f"make MINI_BSZ x N_RESP a multiple of {dp}", key="MINI_BSZ", where=w("MINI_BSZ")))
    if c.ALGORITHM in (Algorithm.GRPO, Algorithm.GSPO) and c.N_RESP < 2:
        out.append(fatal("batch", f"{c.ALGORITHM.value} compares responses within a group; N_RESP={c.N_RESP}",
                         "set N_RESP >= 2 (8 is typical)", key="N_RESP", where=w("N_RESP")))
    if c.VERL_TRAINER_MODE is VerlTrainerMode.SEPARATE_ASYNC and c.TRAIN_BSZ != c.PARAM_SYNC_STEPS * c.MINI_BSZ:
        out.append(fatal("batch", f"separate_async needs TRAIN_BSZ = PARAM_SYNC_STEPS x MINI_BSZ "
                         f"({c.TRAIN_BSZ} != {c.PARAM_SYNC_STEPS} x {c.MINI_BSZ})",
                         f"set PARAM_SYNC_STEPS={c.TRAIN_BSZ // c.MINI_BSZ}" if c.TRAIN_BSZ % c.MINI_BSZ == 0
                         else "set MINI_BSZ to a divisor of TRAIN_BSZ", key="PARAM_SYNC_STEPS",
                         where=w("PARAM_SYNC_STEPS")))
    return out or [ok("batch", f"{c.TRAIN_BSZ} x {c.N_RESP} = {c.TRAIN_BSZ * c.N_RESP} trials/step, "
                   f"{c.TRAIN_BSZ // c.MINI_BSZ} mini-batch(es) over {dp} data-parallel rank(s)")]
