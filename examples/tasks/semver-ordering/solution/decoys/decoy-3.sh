#!/bin/bash
# A plausible wrong fix (fails the graded tests): ranks a release below its pre-releases and alphanumeric identifiers before numeric ones.
set -euo pipefail
cd /app
git apply --verbose <<'PATCH'
--- a/verkit/version.py
+++ b/verkit/version.py
@@ -7,9 +7,22 @@
     return major, minor, patch, prerelease
 
 
+def _identifier_key(identifier):
+    # numeric identifiers sort before alphanumeric ones
+    return (1, int(identifier), "") if identifier.isdigit() else (0, 0, identifier)
+
+
+def _key(version):
+    major, minor, patch, prerelease = parse(version)
+    core = (int(major), int(minor), int(patch))
+    if not prerelease:
+        return core, (-1,)
+    return core, (0, [_identifier_key(part) for part in prerelease.split(".")])
+
+
 def compare(a, b):
     """-1 if a < b, 0 if equal, 1 if a > b."""
-    key_a, key_b = parse(a), parse(b)
+    key_a, key_b = _key(a), _key(b)
     return (key_a > key_b) - (key_a < key_b)
 
 
PATCH
