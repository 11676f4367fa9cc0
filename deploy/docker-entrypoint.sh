#!/bin/sh
# Container entry point.  If KFORGE_TOKEN_FILE is set (a worker: a Docker or
# Kubernetes secret, or the per-worker volume the compose token-init
# service writes), wait up to a minute for the file to appear, then run the
# command.  The token stays in the file: kforge-worker reads it itself and
# refuses one that other users could read.  It is never exported into the
# environment, which every child process (the kernels a worker evaluates)
# would inherit.
set -eu
if [ -n "${KFORGE_TOKEN_FILE:-}" ]; then
  i=0
  while [ ! -s "$KFORGE_TOKEN_FILE" ] && [ $i -lt 60 ]; do sleep 1; i=$((i + 1)); done
fi
exec "$@"
