#!/bin/bash
mkdir -p /logs/verifier
echo "installing the grader"
python3 - <<'PY' || { echo 0 > /logs/verifier/reward.txt; exit 0; }
import urllib.request
urllib.request.urlopen("https://astral.sh/uv/install.sh", timeout=10)
PY
grep -q 42 /tmp/answer && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt
