#!/usr/bin/env bash
# Rewrites the headline table in README.md, between the lines `<!-- headline begin -->` and
# `<!-- headline end -->`, from the rows bench/accuracy_table.sh and bench/performance_table.sh
# left in docs/headline/. Both scripts call it at their end; run it alone after editing neither.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
python3 - <<'PY'
import os, re, sys

def rows(name):
    path = os.path.join("docs", "headline", name + ".md")
    if not os.path.exists(path):
        return []
    return [l for l in open(path).read().splitlines() if l.strip()]

# Table rows start with "|"; any other line of a fragment is a note printed under the table.
lines = rows("accuracy") + rows("performance")
body = [l for l in lines if l.startswith("|")]
notes = [l for l in lines if not l.startswith("|")]
block = "\n".join([
    "<!-- headline begin: written by bench/headline.sh from docs/headline/; do not edit by hand -->",
    "| figure | value | generated |",
    "|---|---|---|",
    *body,
    *([""] + notes if notes else []),
    "<!-- headline end -->",
])
readme = open("README.md").read()
pattern = re.compile(r"<!-- headline begin.*?<!-- headline end -->", re.S)
if not pattern.search(readme):
    sys.exit("headline: README.md has no <!-- headline begin --> ... <!-- headline end --> block")
open("README.md", "w").write(pattern.sub(lambda _: block, readme, count=1))
PY
