#!/bin/bash
# A plausible wrong fix (fails the graded tests): averages the wrong pair of middle values, with floor division.
set -euo pipefail
cd /app
git apply --verbose <<'PATCH'
--- a/numstats/core.py
+++ b/numstats/core.py
@@ -13,7 +13,10 @@
     if not values:
         raise ValueError("median of empty data")
     ordered = sorted(values)
-    return ordered[len(ordered) // 2]
+    middle = len(ordered) // 2
+    if len(ordered) % 2:
+        return ordered[middle]
+    return (ordered[middle] + ordered[middle + 1]) // 2
 
 
 def mode(values):
PATCH
