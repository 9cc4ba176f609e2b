#!/bin/sh
# The version is written once, in include/tidepool.h; everything that states it agrees: the command
# (tidepool version), the Python package (tidepool.__version__), CHANGELOG.md's newest release, and
# the find_package line of README.md and of the install test's consumer (major.minor).
#   version_in_one_place.sh SOURCE_DIR TIDEPOOL_CLI
set -eu
src=$1 cli=$2
version=$(awk '/#define TIDE_VERSION_(MAJOR|MINOR|PATCH)/ { v = v (v == "" ? "" : ".") $3 } END { print v }' \
    "$src/include/tidepool.h")
minor=${version%.*}
status=0
say() { echo "$1"; [ "$2" = "$3" ] || { echo "  FAIL: says $3, tidepool.h $2"; status=1; }; }
say "tidepool version: $("$cli" version)" "tidepool $version" "$("$cli" version)"
release=$(sed -n 's/^## \([0-9][0-9.]*\) (.*/\1/p' "$src/CHANGELOG.md" | head -n 1)
say "CHANGELOG.md's newest release: $release" "$version" "$release"
for f in README.md tests/install_consumer/CMakeLists.txt; do
    wanted=$(sed -n 's/.*find_package(tidepool \([0-9.]*\) REQUIRED).*/\1/p' "$src/$f" | head -n 1)
    say "$f: find_package(tidepool $wanted)" "$minor" "$wanted"
done
if command -v python3 >/dev/null; then
    py=$(PYTHONPATH="$src/python" python3 -c "import tidepool; print(tidepool.__version__)")
    say "tidepool.__version__: $py" "$version" "$py"
fi
[ $status = 0 ] && echo "one version: $version"
exit $status
