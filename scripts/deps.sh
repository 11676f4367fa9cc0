#!/usr/bin/env bash
# Install the Debian 12 packages kforge needs to build, test and run
# (python3-pandas: only for the Python client's to_dataframe() test;
# chromium, ~100 MB: only for the dashboard's browser test, tests/integration/test_ui;
# docker-compose and systemd (systemd-analyze, -sysusers, -tmpfiles): only to validate the
# deployment files in `make lint`, deploy/check.sh).
# As root it runs apt-get; otherwise it prints the exact command to run.
set -euo pipefail

PKGS=(
  build-essential pkg-config git
  libmicrohttpd-dev libhiredis-dev libcjson-dev libcurl4-openssl-dev
  libpq-dev libssl-dev libcriterion-dev libseccomp-dev uidmap zlib1g-dev
  python3-dev python3-numpy libopenblas0-pthread libopenblas-dev
  python3-pandas
  redis-server redis-tools postgresql postgresql-contrib
  curl cppcheck clang-tidy valgrind wrk
  clang libclang-rt-14-dev
  chromium
  docker-compose systemd
)

missing=()
for p in "${PKGS[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$p")
  fi
done

# `make lint` runs the OpenAPI linter with Node (scripts/openapi-lint.sh);
# a Node already installed (another package source) is kept as it is.
if ! command -v npm >/dev/null 2>&1; then
  missing+=(nodejs npm)
fi

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

if [ "$(id -u)" -eq 0 ]; then
  echo "deps: installing ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
  echo "kforge needs these Debian packages; run:" >&2
  echo "  sudo apt-get update && sudo apt-get install -y ${missing[*]}" >&2
  exit 1
fi
