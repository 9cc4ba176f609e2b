#!/bin/sh
# tidepool installed and used as a package: `cmake --install` of the build into a fresh prefix, the
# installed tree moved elsewhere (nothing in it may point at where it was installed), then a program
# built against it through pkg-config (where pkg-config is installed) and through find_package, with
# the shared and with the static library, each run: on the simulated device, and on CUDA device 0 too
# where nvidia-smi sees a GPU.
# Usage: install_and_use.sh BUILD_DIR SOURCE_DIR C_COMPILER
set -eu
build=$1
src=$2
cc=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

cmake --install "$build" --prefix "$work/staged" >/dev/null
mv "$work/staged" "$work/prefix"
prefix=$work/prefix
for f in include/tidepool.h bin/tidepool; do
    [ -f "$prefix/$f" ] || { echo "not installed: $f"; exit 1; }
done
libdir=$(dirname "$(find "$prefix" -name libtidepool.a | head -n 1)")
for f in libtidepool.a libtidepool.so pkgconfig/tidepool.pc cmake/tidepool/tidepoolConfig.cmake; do
    [ -e "$libdir/$f" ] || { echo "not installed: $libdir/$f"; exit 1; }
done
header_version=$(awk '/#define TIDE_VERSION_(MAJOR|MINOR|PATCH)/ { v = v (v == "" ? "" : ".") $3 } END { print v }' \
    "$prefix/include/tidepool.h")

gpu=no
if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then gpu=yes; fi

# Runs a consumer, and again on the GPU if there is one; it must say the header's version and ok.
run() {
    for device in sim $([ $gpu = yes ] && echo cuda); do
        out=$("$@" "$device")
        echo "$device: $out"
        [ "$out" = "tidepool $header_version: ok" ] || { echo "unexpected output from $1 $device"; exit 1; }
    done
}
[ $gpu = yes ] || echo "no GPU (nvidia-smi): the consumers run on the simulated device only"

if command -v pkg-config >/dev/null; then
    export PKG_CONFIG_PATH="$libdir/pkgconfig"
    # CMakeLists.txt reads the version from tidepool.h: the two must agree
    pc_version=$(pkg-config --modversion tidepool)
    [ "$pc_version" = "$header_version" ] ||
        { echo "tidepool.pc says version $pc_version, tidepool.h $header_version"; exit 1; }
    # shellcheck disable=SC2046 # the flags are meant to split into words
    "$cc" -o "$work/pc_shared" "$src/tests/install_consumer/consumer.c" $(pkg-config --cflags --libs tidepool)
    LD_LIBRARY_PATH="$libdir" run "$work/pc_shared"
    # shellcheck disable=SC2046
    "$cc" -o "$work/pc_static" "$src/tests/install_consumer/consumer.c" $(pkg-config --cflags tidepool) \
        "$libdir/libtidepool.a" $(pkg-config --libs-only-other --libs-only-l --static tidepool | sed 's/-ltidepool//')
    run "$work/pc_static"
    echo "pkg-config: built and ran against the shared and the static library"
else
    echo "pkg-config is not installed (apt-get install pkgconf): its part is not tried"
fi

CC="$cc" cmake -S "$src/tests/install_consumer" -B "$work/consumer" -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$work/consumer" >/dev/null
run "$work/consumer/consumer_shared"
run "$work/consumer/consumer_static"
echo "find_package: built and ran against the shared and the static library"
