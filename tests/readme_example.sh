#!/bin/sh
# README.md's C section as a newcomer follows it: the ```c block saved as app.c, then the ```sh block
# after it run line by line as written (make install into $HOME/.local, pkg-config, cc, ./a.out), with
# HOME a fresh folder. Only `make` is pointed at this tree and this build (a newcomer runs it in the
# repository's root, where the Makefile is). The output must be what the block's last comment says.
#   tests/readme_example.sh SOURCE_DIR BUILD_DIR WORK
set -eu
[ $# -eq 3 ] || { echo "usage: $0 SOURCE_DIR BUILD_DIR WORK" >&2; exit 2; }
src=$1 build=$2 work=$3
# WORK is emptied: refuse anything but the test's own folder (a stale caller passing other arguments).
case "$work" in */readme_example) ;; *) echo "$0: WORK must be a folder named readme_example, not $work" >&2; exit 2 ;; esac
rm -rf "$work"
mkdir -p "$work/home"
section=$(awk '/^## C$/ { on = 1; next } on && /^## / { exit } on' "$src/README.md")
printf '%s\n' "$section" | awk '/^```c$/ { on = 1; next } on && /^```$/ { exit } on' > "$work/app.c"
printf '%s\n' "$section" | awk '/^```sh$/ { on = 1; next } on && /^```$/ { exit } on' > "$work/commands.sh"
[ -s "$work/app.c" ] || { echo "README.md's C section has no \`\`\`c block" >&2; exit 1; }
[ -s "$work/commands.sh" ] || { echo "README.md's C section has no \`\`\`sh block after the example" >&2; exit 1; }
expected=$(sed -n '$s/.*# *//p' "$work/commands.sh")
[ -n "$expected" ] || { echo "the last line of the \`\`\`sh block has no comment saying what it prints" >&2; exit 1; }
echo "== README.md's commands, run in $work with HOME=$work/home:"
cat "$work/commands.sh"
echo "=="
cd "$work"
# A clean environment, as a newcomer's shell: no library path, no pkg-config path, no make flags of
# the make check that runs this test.
out=$(env -i PATH="$PATH" HOME="$work/home" SRC="$src" BUILD="$build" sh -c '
    set -e
    make() { command make -C "$SRC" BUILD="$BUILD" "$@" >/dev/null; }
    . ./commands.sh' 2>&1) || { echo "$out"; echo "FAIL: README.md's commands failed"; exit 1; }
echo "$out"
last=$(printf '%s\n' "$out" | tail -n 1)
# The bytes released are the segment the example's 1 MiB took: the figure the README states.
[ "$last" = "$expected" ] || { echo "FAIL: README.md says ./a.out prints '$expected'"; exit 1; }
echo "README.md's C example: built with its commands and ran as it says"
