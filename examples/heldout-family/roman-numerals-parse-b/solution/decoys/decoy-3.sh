#!/bin/bash
# A plausible wrong fix (fails the graded tests): reads each symbol at most once and accepts non-canonical spellings.
set -euo pipefail
cd /app
git apply --verbose <<'PATCH'
--- a/numerals/roman.py
+++ b/numerals/roman.py
@@ -17,4 +17,14 @@
 
 
 def from_roman(text):
-    raise NotImplementedError("from_roman")
+    if not isinstance(text, str) or not text:
+        raise ValueError(f"not a roman numeral: {text!r}")
+    total, rest = 0, text
+    for value, symbol in _VALUES:
+        if rest.startswith(symbol):
+            total += value
+            rest = rest[len(symbol):]
+    # only the canonical spelling round-trips
+    if rest or not 1 <= total <= 3999:
+        raise ValueError(f"not a roman numeral: {text!r}")
+    return total
PATCH
