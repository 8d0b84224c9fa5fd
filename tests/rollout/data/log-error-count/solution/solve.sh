#!/bin/bash
# Count entries whose third field (the level) is ERROR.
set -euo pipefail
awk '$3 == "ERROR"' /app/logs/app.log | wc -l > /app/error_count.txt
