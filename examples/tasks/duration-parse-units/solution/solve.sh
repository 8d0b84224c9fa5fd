#!/bin/bash
# Reference solution: applies the fix as a patch to /app.
set -euo pipefail
cd /app
git apply --verbose <<'PATCH'
--- a/timefmt/duration.py
+++ b/timefmt/duration.py
@@ -2,16 +2,21 @@
 
 import re
 
-_PATTERN = re.compile(r"(?:(\d+)h)?(?:(\d+)m)?")
+_PATTERN = re.compile(r"(?:(\d+)d\s*)?(?:(\d+)h\s*)?(?:(\d+)m\s*)?(?:(\d+)s)?")
+_UNIT_SECONDS = (86400, 3600, 60, 1)
 
 
 def parse_duration(text):
     """'1h30m' -> 5400 (seconds)."""
+    if not isinstance(text, str):
+        raise ValueError(f"bad duration: {text!r}")
+    text = text.strip()
+    if text.isdigit():
+        return int(text)
     match = _PATTERN.fullmatch(text)
-    if not match or not text:
+    if not text or not match:
         raise ValueError(f"bad duration: {text!r}")
-    hours, minutes = (int(g) if g else 0 for g in match.groups())
-    return hours * 3600 + minutes * 60
+    return sum(int(g) * size for g, size in zip(match.groups(), _UNIT_SECONDS) if g)
 
 
 def format_duration(seconds):
PATCH
