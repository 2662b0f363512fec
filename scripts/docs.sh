#!/usr/bin/env bash
# Renders the diagrams of docs/ (docs/diagrams/*.dot) to the SVG files committed next to them.
# Usage: scripts/docs.sh [--png]   (--png also writes PNG copies, handy to look at a change)
# DOCS_OUT_DIR=dir writes the files there instead (the docs test renders into a scratch directory).
set -euo pipefail
cd "$(dirname "$0")/.."

command -v dot >/dev/null || { echo "docs.sh: Graphviz 'dot' is missing: scripts/install-deps.sh installs it" >&2; exit 1; }
out="${DOCS_OUT_DIR:-docs/diagrams}"
mkdir -p "$out"
for src in docs/diagrams/*.dot; do
  name="$(basename "$src" .dot)"
  dot -Tsvg "$src" -o "$out/$name.svg"
  if [[ "${1:-}" == "--png" ]]; then
    dot -Tpng -Gdpi=110 "$src" -o "$out/$name.png"
  fi
  echo "docs.sh: $out/$name.svg"
done
