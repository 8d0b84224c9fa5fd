#!/bin/bash
# A plausible wrong fix (fails the graded tests): strips apostrophes but neither lower-cases nor drops punctuation.
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
+    return [w.strip("'") for w in text.split() if w.strip("'")]
 
 
 def top_words(text, n):
PATCH
