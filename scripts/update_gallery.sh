#!/usr/bin/env bash
# Regenerate docs/gallery/ (figures and captions of the docs' Gallery page) from `fedsde reproduce --quick`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/env.sh
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
.venv/bin/fedsde reproduce --quick --no-claims --out "$tmp/run" --json > "$tmp/out.json"
rm -rf docs/gallery
mkdir -p docs/gallery
cp "$tmp"/run/figures/*.png docs/gallery/
cp "$tmp/run/summary.json" docs/gallery/summary.json
echo "docs/gallery: $(ls docs/gallery/*.png | wc -l) figures"
