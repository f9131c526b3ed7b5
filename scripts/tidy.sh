#!/usr/bin/env bash
# clang-tidy (pinned in .venv, the checks of .clang-tidy) over the C++ sources of the build tree's
# compile database. Any finding fails the run.
#   bash scripts/tidy.sh                 the layers held clean (LAYERS below)
#   bash scripts/tidy.sh --all           every source file of the compile database
#   bash scripts/tidy.sh FILE...         those files only (paths from the repository root)
# Runs one clang-tidy per core. Expects scripts/bootstrap.sh to have run (build/ and .venv/).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
DB=build/compile_commands.json
[[ -f $DB ]] || { echo "tidy: no $DB; run scripts/bootstrap.sh first" >&2; exit 1; }

# Held clean in the default test tier: every layer (about 10 minutes on 2 cores, most of it the
# torch extension's files, which parse torch's headers).
LAYERS="common/ hw/ firmware/ driver/ simd/ sim/ testbenches/ backend/compiler/ backend/csrc/ tools/"
if [[ ${1:-} == --all ]]; then
  LAYERS=""
  shift
fi
if (($#)); then
  files=("$@")
else
  # The project's own translation units, from the compile database (the fuzzers are built apart,
  # with clang, in build/fuzz).
  mapfile -t files < <(.venv/bin/python - "$DB" "$LAYERS" <<'PY'
import json, os, sys
root = os.getcwd()
layers = tuple(sys.argv[2].split()) or ("",)
seen = set()
for entry in json.load(open(sys.argv[1])):
    path = os.path.relpath(os.path.join(entry["directory"], entry["file"]), root)
    if path.startswith(layers) and not path.startswith(("build", "..")) and path.endswith(".cpp") and path not in seen:
        seen.add(path)
        print(path)
PY
  )
fi
echo "tidy: ${#files[@]} files, $(nproc) at a time"
# Each file's findings go to its own log, printed when it has any; xargs exits non-zero if any did.
log=$(mktemp -d)
trap 'rm -rf "$log"' EXIT
printf '%s\n' "${files[@]}" | xargs -P "$(nproc)" -I{} sh -c '
  out="$1/$(echo "$2" | tr / _).log"
  if ! .venv/bin/clang-tidy -p build --quiet --warnings-as-errors="*" "$2" >"$out" 2>&1; then
    cat "$out"; exit 1
  fi' _ "$log" {}
echo "tidy: clean"
