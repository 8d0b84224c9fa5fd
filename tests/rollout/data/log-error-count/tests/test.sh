#!/bin/bash
# Terminal-Bench style: the hidden tests run with the image's python3, from the task's
# working dir, and the reward is all-or-nothing.
cd /app
python3 -m pytest /tests/test_outputs.py -rA
if [ $? -eq 0 ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
