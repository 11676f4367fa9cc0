#!/usr/bin/env bash
# Validate the deployment files against the tools that read them (`make lint`
# runs this; nothing here needs a container engine, a cluster or systemd
# running):
#  - systemd: `systemd-analyze verify` of every unit in a scratch root that
#    holds `make install`'s files (so ExecStart= paths are checked) and this
#    machine's own system units; any message fails.  `systemd-analyze
#    security --offline` must score kforge-api and kforge-scheduler at most
#    4.0 (the worker cannot: its sandbox needs namespaces, docs/security.md).
#  - compose: `docker-compose config` (Debian's docker-compose, which
#    scripts/deps.sh installs) parses docker-compose.yml and resolves it.
#  - Kubernetes: every document of deploy/k8s against the Kubernetes API's
#    JSON schemas (kubernetes-models, pinned by tools/deploy-lint's lock file,
#    installed from the npm registry on first use).  These schemas check types,
#    required fields and enums but allow unknown fields, so a misspelt field
#    name is not caught.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
root=$(mktemp -d /tmp/kforge-deploy-check.XXXXXX)
trap 'rm -rf "$root"' EXIT
fail=0

# systemd
make --no-print-directory -s install BUILD="$BUILD" DESTDIR="$root" PREFIX=/usr/local >/dev/null
mkdir -p "$root/etc/systemd/system" "$root/usr/lib/systemd" "$root/usr/lib/sysusers.d" "$root/usr/lib/tmpfiles.d"
cp -a /lib/systemd/system "$root/usr/lib/systemd/"
cp deploy/systemd/*.service "$root/etc/systemd/system/"
cp deploy/systemd/kforge.sysusers.conf "$root/usr/lib/sysusers.d/kforge.conf"
cp deploy/systemd/kforge.tmpfiles.conf "$root/usr/lib/tmpfiles.d/kforge.conf"
out=$(systemd-analyze verify --man=no --root="$root" kforge-api.service kforge-scheduler.service \
        kforge-worker@1.service 2>&1) || fail=1
if [ -n "$out" ]; then
  echo "deploy-check: systemd-analyze verify:"; echo "$out"; fail=1
else
  echo "deploy-check: systemd units verify cleanly"
fi
for u in kforge-api kforge-scheduler; do
  if ! systemd-analyze security --offline=true --threshold=40 --root="$root" "$u.service" >"$root/sec.txt" 2>&1; then
    echo "deploy-check: $u.service scores over 4.0:"; grep -E "✗|Overall" "$root/sec.txt"; fail=1
  else
    echo "deploy-check: $(grep Overall "$root/sec.txt" | sed 's/^→ //')"
  fi
done
# sysusers makes the kforge user in the scratch root, then tmpfiles the folders it owns.
if ! out=$(systemd-sysusers --root="$root" 2>&1) || [ ! -d "$root/etc" ] || ! grep -q '^kforge:' "$root/etc/passwd"; then
  echo "deploy-check: systemd-sysusers refused deploy/systemd/kforge.sysusers.conf: $out"; fail=1
elif ! out=$(systemd-tmpfiles --root="$root" --create 2>&1) || [ ! -d "$root/var/lib/kforge" ]; then
  echo "deploy-check: systemd-tmpfiles refused deploy/systemd/kforge.tmpfiles.conf: $out"; fail=1
else
  echo "deploy-check: sysusers and tmpfiles entries apply"
fi

# compose
if command -v docker-compose >/dev/null 2>&1; then
  if KFORGE_BOOTSTRAP_TOKEN=check docker-compose -f docker-compose.yml config -q; then
    echo "deploy-check: docker-compose.yml resolves ($(docker-compose version --short))"
  else
    echo "deploy-check: docker-compose config refused docker-compose.yml"; fail=1
  fi
else
  echo "deploy-check: docker-compose is missing; scripts/deps.sh installs it (as root)" >&2; fail=1
fi

# Kubernetes
dir=tools/deploy-lint
stamp=$dir/node_modules/.kforge-installed
if ! command -v npm >/dev/null 2>&1; then
  echo "deploy-check: npm is missing; scripts/deps.sh installs nodejs and npm (as root)" >&2; fail=1
else
  if [ ! -f "$stamp" ] || [ "$dir/package-lock.json" -nt "$stamp" ]; then
    echo "deploy-check: installing the pinned kubernetes-models (npm ci in $dir)" >&2
    (cd "$dir" && npm ci --no-audit --no-fund --ignore-scripts --loglevel=error)
    touch "$stamp"
  fi
  node "$dir/k8s-validate.mjs" deploy/k8s/*.yaml || fail=1
fi
exit $fail
