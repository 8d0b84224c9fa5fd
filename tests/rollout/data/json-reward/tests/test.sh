#!/bin/bash
# reward.json wins over reward.txt.
echo 0 > /logs/verifier/reward.txt
echo "{\"reward\": 0.75, \"tests_passed\": 3}" > /logs/verifier/reward.json
