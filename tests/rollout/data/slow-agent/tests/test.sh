#!/bin/bash
# Reward 1 only if the solution finished (it cannot within the agent timeout).
if [ -f /tmp/solved ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt
