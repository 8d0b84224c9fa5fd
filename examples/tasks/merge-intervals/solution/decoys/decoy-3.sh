#!/bin/bash
# A plausible wrong fix (fails the graded tests): merges intervals that touch or are one apart, but does not sort the input.
set -euo pipefail
cd /app
git apply --verbose <<'PATCH'
--- a/spans/merge.py
+++ b/spans/merge.py
@@ -4,8 +4,8 @@
 def merge(intervals):
     """Union of (start, end) intervals as a sorted list of disjoint tuples."""
     merged = []
-    for start, end in intervals:
-        if merged and start < merged[-1][1]:
+    for start, end in intervals:
+        if merged and start <= merged[-1][1] + 1:
             merged[-1] = (merged[-1][0], max(merged[-1][1], end))
         else:
             merged.append((start, end))
PATCH
