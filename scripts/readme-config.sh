#!/usr/bin/env bash
# Rewrite README.md's configuration table (between <!-- config:begin -->
# and <!-- config:end -->) from the declaration in common/kf_config.h, as
# printed by `kforge-api config --markdown`.  tests/unit/test_readme.c fails
# when the two disagree.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
make -s "$BUILD/bin/kforge-api"
table=$("$BUILD/bin/kforge-api" config --markdown)
/usr/bin/python3 - "$table" <<'PY'
import sys, re
table = sys.argv[1].rstrip("\n")
text = open("README.md").read()
new, n = re.subn(r"(<!-- config:begin -->\n).*?(<!-- config:end -->)",
                 lambda m: m.group(1) + table + "\n" + m.group(2), text, flags=re.S)
if n != 1:
    sys.exit("README.md lacks the <!-- config:begin --> / <!-- config:end --> markers")
open("README.md", "w").write(new)
PY
