#!/usr/bin/env bash
# Lint api/openapi.json with Redocly's OpenAPI linter (`make lint` runs it).
# The linter is pinned by tools/openapi-lint/package.json and its
# package-lock.json and installed there from the npm registry with `npm ci`
# on first use (and again when the lock file changes); kforge itself never
# needs Node, only this check does.  The rules are
# tools/openapi-lint/redocly.yaml: the recommended set, warnings as errors.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=tools/openapi-lint
if ! command -v npm >/dev/null 2>&1; then
  echo "openapi-lint: npm is missing; scripts/deps.sh installs nodejs and npm (as root)" >&2
  exit 1
fi
stamp=$dir/node_modules/.kforge-installed
if [ ! -x "$dir/node_modules/.bin/redocly" ] || [ ! -f "$stamp" ] || [ "$dir/package-lock.json" -nt "$stamp" ]; then
  echo "openapi-lint: installing the pinned @redocly/cli (npm ci in $dir)" >&2
  (cd "$dir" && npm ci --no-audit --no-fund --ignore-scripts --loglevel=error)
  touch "$stamp"
fi
REDOCLY_TELEMETRY=off REDOCLY_SUPPRESS_UPDATE_NOTICE=true \
  "$dir/node_modules/.bin/redocly" lint api/openapi.json --config "$dir/redocly.yaml" --format=stylish
