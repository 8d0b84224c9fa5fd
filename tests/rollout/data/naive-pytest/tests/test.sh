#!/bin/bash
mkdir -p /logs/verifier
cd /app
python3 -m pytest -q /tests/test_answer.py
if [ $? -eq 0 ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
