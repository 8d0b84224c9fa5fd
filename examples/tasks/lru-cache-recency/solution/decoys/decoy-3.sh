#!/bin/bash
# A plausible wrong fix (fails the graded tests): get and put both move the key to the old end, so the newest key is evicted first.
set -euo pipefail
cd /app
git apply --verbose <<'PATCH'
--- a/cachekit/lru.py
+++ b/cachekit/lru.py
@@ -11,10 +11,14 @@
         self._data: OrderedDict = OrderedDict()
 
     def get(self, key, default=None):
-        return self._data.get(key, default)
+        if key not in self._data:
+            return default
+        self._data.move_to_end(key, last=False)
+        return self._data[key]
 
     def put(self, key, value) -> None:
         self._data[key] = value
+        self._data.move_to_end(key, last=False)
         if len(self._data) > self.capacity:
             self._data.popitem(last=False)
 
PATCH
