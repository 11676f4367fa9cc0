#!/usr/bin/env bash
# Drive `kforge mcp` with the official MCP Inspector's CLI mode (a real MCP
# client: the TypeScript SDK's stdio transport, lifecycle, and its check of
# every structuredContent against the tool's outputSchema), as
# `make mcp-inspector-check` does.  Not part of `make test`: it needs the npm
# registry the first time.  The Inspector is pinned by
# tools/mcp-inspector/package.json and package-lock.json (the v1 line,
# 1.0.3: v2 needs Node >= 22.19; v1 runs on Node 20 with an engine warning)
# and installed there with `npm ci` on first use.
#
# Checks: tools/list has the nine tools with input and output schemas; a
# profile of a small library kernel (softmax 128x512) has a latency and
# findings on source lines; validate passes; docs finds an error code's
# row; arguments that break the schema are a tool error (isError) with
# kforge's INVALID code; an unknown tool makes the Inspector fail (-32602).
# Each step's output is kept in $OUT (default build/mcp-inspector/).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
OUT=${OUT:-$BUILD/mcp-inspector}
dir=tools/mcp-inspector
for tool in npm jq; do
  command -v $tool >/dev/null 2>&1 || { echo "mcp-inspector-check: $tool is missing (scripts/deps.sh)" >&2; exit 1; }
done
[ -x "$BUILD/bin/kforge" ] || { echo "mcp-inspector-check: build $BUILD/bin/kforge first (make)" >&2; exit 1; }
stamp=$dir/node_modules/.kforge-installed
if [ ! -x "$dir/node_modules/.bin/mcp-inspector" ] || [ ! -f "$stamp" ] || [ "$dir/package-lock.json" -nt "$stamp" ]; then
  echo "mcp-inspector-check: installing the pinned @modelcontextprotocol/inspector (npm ci in $dir)" >&2
  (cd "$dir" && npm ci --no-audit --no-fund --ignore-scripts --loglevel=error)
  touch "$stamp"
fi
mkdir -p "$OUT"
export KFORGE_KERNELS_DIR=${KFORGE_KERNELS_DIR:-$PWD/kernels}
kforge=$(realpath "$BUILD/bin/kforge")
echo "mcp-inspector-check: @modelcontextprotocol/inspector $(jq -r .version "$dir/node_modules/@modelcontextprotocol/inspector/package.json"), node $(node --version)"

fails=0
# step NAME JQ-CHECK INSPECTOR-ARGS...: the Inspector's JSON in $OUT/NAME.json
step() {
  local name=$1 check=$2 rc=0
  shift 2
  NODE_NO_WARNINGS=1 timeout 300 "$dir/node_modules/.bin/mcp-inspector" --cli "$kforge" mcp "$@" \
    >"$OUT/$name.json" 2>"$OUT/$name.err" || rc=$?
  if [ $rc -eq 0 ] && jq -e "$check" "$OUT/$name.json" >/dev/null 2>&1; then
    echo "ok   $name"
  else
    echo "FAIL $name (exit $rc): $(grep -v -e EBADENGINE -e deprecated -e Upgrade -e 'security fixes' "$OUT/$name.err" | grep . | head -3)"
    fails=$((fails + 1))
  fi
}

step tools-list '(.tools | map(.name)) == ["run","profile","validate","docs","submit_job","job_status","job_iterations","compare_jobs","library_ops"] and all(.tools[]; .inputSchema.type == "object" and .outputSchema.type == "object")' \
  --method tools/list
step profile '.isError == false and .structuredContent.ok and .structuredContent.latency_ns > 0 and (.structuredContent.findings[0].lines[0].loc | test("softmax.py:[0-9]+")) and (.content[0].text | fromjson) == .structuredContent' \
  --method tools/call --tool-name profile --tool-arg op=softmax --tool-arg 'shapes=[[128,512]]'
step validate '.isError == false and .structuredContent.pass == true and (.structuredContent.checks | length) == 2' \
  --method tools/call --tool-name validate --tool-arg op=softmax --tool-arg 'shapes=[[128,512]]' --tool-arg 'seeds=[1,2]'
step docs '.isError == false and any(.structuredContent.sections[].matching_lines[]?; test("`SIM_E_PARTITION_LIMIT`"))' \
  --method tools/call --tool-name docs --tool-arg query=SIM_E_PARTITION_LIMIT
step bad-arguments '.isError == true and (.content[0].text | fromjson | .error.code) == "INVALID"' \
  --method tools/call --tool-name profile --tool-arg op=softmax --tool-arg 'shapes=[[0]]'
# an unknown tool is a protocol error (-32602): the Inspector exits non-zero
if NODE_NO_WARNINGS=1 timeout 120 "$dir/node_modules/.bin/mcp-inspector" --cli "$kforge" mcp --method tools/call \
     --tool-name no_such_tool >"$OUT/unknown-tool.json" 2>"$OUT/unknown-tool.err"; then
  echo "FAIL unknown-tool: the Inspector exited 0"; fails=$((fails + 1))
elif grep -q -- '-32602' "$OUT/unknown-tool.err"; then
  echo "ok   unknown-tool ($(grep -o 'MCP error -32602[^(]*' "$OUT/unknown-tool.err" | head -1))"
else
  echo "FAIL unknown-tool: $(grep . "$OUT/unknown-tool.err" | tail -2)"; fails=$((fails + 1))
fi
echo "mcp-inspector-check: $fails failed (outputs in $OUT/)"
[ $fails -eq 0 ]
