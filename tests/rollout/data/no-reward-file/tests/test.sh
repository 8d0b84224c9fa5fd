#!/bin/bash
# `set -e` fires before the reward is written: no reward file at all.
set -e
false
echo 1 > /logs/verifier/reward.txt
