#!/usr/bin/env bash
# Regenerate the Python wire code from thrift/mezzo.thrift into core/mezzo/wire/.
# Usage: thrift/generate.sh [OUTPUT_DIR]   (default: core/mezzo/wire)
# The committed code must equal what this produces; tests/test_wire_generated.py checks it.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here/../core/mezzo/wire}
command -v thrift >/dev/null || { echo "thrift compiler missing: apt-get install thrift-compiler" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
thrift --gen py:slots,enum,package_prefix=mezzo. -out "$tmp" "$here/mezzo.thrift"
mkdir -p "$out"
rm -f "$out"/*.py
cp "$tmp"/wire/*.py "$out"/
