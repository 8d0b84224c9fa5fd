#!/bin/bash
# Runs far past the verifier timeout.
sleep 120
echo 1 > /logs/verifier/reward.txt
