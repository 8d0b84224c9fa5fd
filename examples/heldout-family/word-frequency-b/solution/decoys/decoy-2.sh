#!/bin/bash
# A plausible wrong fix (fails the graded tests): finds the words but forgets to lower-case the text first.
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
+    return [w.strip("'") for w in re.findall(r"[a-z0-9']+", text) if w.strip("'")]
 
 
 def top_words(text, n):
PATCH
