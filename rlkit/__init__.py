"""rlkit: RL training of coding-agent policies on real repository tasks.

Heavy modules (ray, torch, verl, vllm) are imported lazily by the code paths that
need them, so `import rlkit` and `rlkit check` stay fast.
"""

__version__ = "0.1.0"


def check(config_path: str, **kwargs):
    """Run preflight (Run Validation) on a run config; returns the report."""
    from rlkit.validate.preflight import run_preflight

    return run_preflight(config_path, **kwargs)


__all__ = ["__version__", "check"]
