#!/bin/bash
# Reference solution: applies the fix as a patch to /app.
set -euo pipefail
cd /app
git apply --verbose <<'PATCH'
--- a/textkit/slug.py
+++ b/textkit/slug.py
@@ -8,4 +8,4 @@
     """Turn a title into a lowercase ASCII slug: 'Hello World' -> 'hello-world'."""
     text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
     text = re.sub(r"[^A-Za-z0-9]+", sep, text)
-    return text.lower()
+    return text.strip(sep).lower()
PATCH
