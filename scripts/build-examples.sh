#!/usr/bin/env bash
# Builds the example packages under examples/ as a third party builds theirs:
# against this package's exports (berth/backend-kit, berth/conformance),
# with node_modules/berth linking this checkout as `npm install` of a local
# path would. Run after the package itself is compiled (dist/).
set -euo pipefail
cd "$(dirname "$0")/.."
for example in examples/*/; do
  example=${example%/}
  [ -f "$example/tsconfig.json" ] || continue
  mkdir -p "$example/node_modules"
  ln -sfn ../../.. "$example/node_modules/berth"
  npx tsc -p "$example/tsconfig.json"
done
