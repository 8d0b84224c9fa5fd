#!/usr/bin/env bash
# Builds .gpu_site/: verl and the pure-Python packages its core_algos import needs, copied from
# .venv, for a GPU box that has torch and transformers but no verl and no network.
# There: PYTHONPATH=$PWD/.gpu_site:$PWD python3 bench/gpu_update.py   (~10 MB; git-ignore it locally:
# echo /.gpu_site/ >> .git/info/exclude)
set -euo pipefail
cd "$(dirname "$0")/.."
site=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
rm -rf .gpu_site && mkdir .gpu_site
for pkg in verl omegaconf antlr4 codetiming tensordict pyvers cloudpickle; do
  cp -r "$site/$pkg" .gpu_site/
done
cp -r "$site"/{verl,omegaconf,codetiming,tensordict,pyvers,cloudpickle}-*.dist-info "$site"/antlr4_python3_runtime-*.dist-info .gpu_site/
find .gpu_site -name __pycache__ -type d -prune -exec rm -rf {} +
du -sh .gpu_site
