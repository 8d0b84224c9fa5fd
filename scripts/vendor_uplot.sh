#!/usr/bin/env bash
# Vendors uPlot (the dashboard's chart library) from the npm registry into rlkit/monitor/static/vendor/.
# The files are committed, so setup and the dashboard need no network; run this to change the version.
# setup.sh runs it only when the files are missing. Usage: bash scripts/vendor_uplot.sh [VERSION]
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION=${1:-1.6.32}
DEST=rlkit/monitor/static/vendor
if [ -f "$DEST/uPlot.iife.min.js" ] && grep -qx "uplot@$VERSION" "$DEST/VERSION" 2>/dev/null; then
  exit 0
fi
command -v npm >/dev/null || { echo "vendor_uplot.sh: npm not found (apt-get install npm)" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd "$work" && npm pack --silent "uplot@$VERSION" >/dev/null && tar xzf uplot-*.tgz)
mkdir -p "$DEST"
cp "$work/package/dist/uPlot.iife.min.js" "$work/package/dist/uPlot.min.css" "$DEST/"
cp "$work/package/LICENSE" "$DEST/uPlot.LICENSE"
echo "uplot@$VERSION" > "$DEST/VERSION"
echo "vendored uplot@$VERSION into $DEST"
