#!/bin/bash
# Reference solution: applies the fix as a patch to /app.
set -euo pipefail
cd /app
git apply --verbose <<'PATCH'
--- a/confkit/parser.py
+++ b/confkit/parser.py
@@ -1,11 +1,24 @@
 """A small INI-style config parser."""
+
+import re
 
 
 class ParseError(ValueError):
     pass
 
 
+_QUOTED = re.compile(r'"([^"]*)"\s*(?:[#;].*)?')
+_COMMENT = re.compile(r"\s[#;]")
+
+
 def _parse_value(raw):
+    raw = raw.strip()
+    quoted = _QUOTED.fullmatch(raw)
+    if quoted:
+        return quoted.group(1)
+    comment = _COMMENT.search(raw)
+    if comment:
+        raw = raw[:comment.start()]
     return raw.strip()
 
 
PATCH
