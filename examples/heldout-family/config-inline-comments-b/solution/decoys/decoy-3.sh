#!/bin/bash
# A plausible wrong fix (fails the graded tests): cuts a value at any # or ; and keeps the quotes around a quoted value.
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
+_COMMENT = re.compile(r"[#;]")
+
+
 def _parse_value(raw):
+    raw = raw.strip()
+    quoted = _QUOTED.fullmatch(raw)
+    if quoted:
+        return quoted.group(0)
+    comment = _COMMENT.search(raw)
+    if comment:
+        raw = raw[:comment.start()]
     return raw.strip()
 
 
PATCH
