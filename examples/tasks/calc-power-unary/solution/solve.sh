#!/bin/bash
# Reference solution: applies the fix as a patch to /app.
set -euo pipefail
cd /app
git apply --verbose <<'PATCH'
--- a/minicalc/evaluator.py
+++ b/minicalc/evaluator.py
@@ -7,7 +7,7 @@
     pass
 
 
-_TOKEN = re.compile(r"\s*(?:(\d+\.\d*|\.\d+|\d+)|(.))")
+_TOKEN = re.compile(r"\s*(?:(\d+\.\d*|\.\d+|\d+)|(\*\*|.))")
 
 
 def tokenize(text):
@@ -16,7 +16,7 @@
         if number:
             tokens.append(float(number) if "." in number else int(number))
         elif op.strip():
-            if op not in "+-*/()":
+            if op not in ("+", "-", "*", "/", "(", ")", "**"):
                 raise CalcError(f"unexpected character {op!r}")
             tokens.append(op)
     return tokens
@@ -44,14 +44,32 @@
         return value
 
     def term(self):
-        value = self.atom()
+        value = self.unary()
         while self.peek() in ("*", "/"):
             op = self.take()
-            rhs = self.atom()
+            rhs = self.unary()
             if op == "/" and rhs == 0:
                 raise CalcError("division by zero")
             value = value * rhs if op == "*" else value / rhs
         return value
+
+    def unary(self):
+        if self.peek() in ("+", "-"):
+            op = self.take()
+            value = self.unary()
+            return -value if op == "-" else value
+        return self.power()
+
+    def power(self):
+        base = self.atom()
+        if self.peek() == "**":
+            self.take()
+            exponent = self.unary()  # right-associative; allows 2 ** -1
+            try:
+                return base ** exponent
+            except ZeroDivisionError as exc:
+                raise CalcError("division by zero") from exc
+        return base
 
     def atom(self):
         token = self.take()
PATCH
