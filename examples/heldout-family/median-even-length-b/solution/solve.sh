#!/bin/bash
# Reference solution: applies the fix as a patch to /app.
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
+    return (ordered[middle - 1] + ordered[middle]) / 2
 
 
 def mode(values):
PATCH
