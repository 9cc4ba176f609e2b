#!/bin/sh
# The C example in README.md compiles as written, with warnings as errors, against the build's static
# library, and runs: a newcomer copying it gets a working program.
#   tests/readme_example.sh SOURCE_DIR BUILD_DIR CC WORK
set -eu
src=$1 build=$2 cc=$3 work=$4
mkdir -p "$work"
awk '/^```c$/ { on = 1; next } on && /^```$/ { exit } on' "$src/README.md" > "$work/example.c"
[ -s "$work/example.c" ] || { echo "README.md has no \`\`\`c block" >&2; exit 1; }
"$cc" -std=c11 -Wall -Wextra -Werror -I"$src/include" "$work/example.c" -o "$work/example" \
    "$build/libtidepool.a" -lpthread -ldl -lm
"$work/example"
