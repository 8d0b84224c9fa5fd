#!/bin/bash
# Reference solution: applies the fix as a patch to /app.
set -euo pipefail
cd /app
git apply --verbose <<'PATCH'
--- a/wordfreq/count.py
+++ b/wordfreq/count.py
@@ -1,10 +1,11 @@
 """Word frequencies."""
 
+import re
 from collections import Counter
 
 
 def words(text):
-    return text.split()
+    return [w.strip("'") for w in re.findall(r"[a-z0-9']+", text.lower()) if w.strip("'")]
 
 
 def top_words(text, n):
PATCH
