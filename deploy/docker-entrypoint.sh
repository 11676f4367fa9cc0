#!/bin/sh
# Container entry point: if KFORGE_TOKEN_FILE names a file (a secret or a
# shared volume written by the token-init service), export its content as
# KFORGE_TOKEN; then run the command.
set -eu
if [ -n "${KFORGE_TOKEN_FILE:-}" ]; then
  i=0
  while [ ! -s "$KFORGE_TOKEN_FILE" ] && [ $i -lt 60 ]; do sleep 1; i=$((i + 1)); done
  KFORGE_TOKEN=$(cat "$KFORGE_TOKEN_FILE")
  export KFORGE_TOKEN
  unset KFORGE_TOKEN_FILE
fi
exec "$@"
