#!/bin/bash
# Grades /app with the hidden suite. Reward is all-or-nothing: 1 when every graded
# test passes, else 0. A reward is written whatever pytest does (no `set -e` here).
mkdir -p /logs/verifier
cd /tests || { echo 0 > /logs/verifier/reward.txt; exit 0; }
# -I and -c /dev/null: nothing the agent left in /app (a pytest.py, conftest.py, ini file)
# can change how pytest runs; /app only joins sys.path through the pythonpath option.
python3 -I -B -m pytest -q -p no:cacheprovider --noconftest -c /dev/null --rootdir=/tests \
    -o pythonpath=/app /tests/test_graded.py
status=$?
if [ "$status" -eq 0 ]; then reward=1; else reward=0; fi
echo "$reward" > /logs/verifier/reward.txt
echo "pytest exit status $status -> reward $reward"
