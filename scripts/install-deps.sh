#!/bin/sh
# Installs what building and testing tidepool needs on Debian. Run as root, or with sudo available.
#   scripts/install-deps.sh            a C compiler, binutils, make, CMake, gzip, pkgconf (make demo,
#                                      make check)
#   scripts/install-deps.sh fuzz       clang and its runtime libraries (make fuzz: libFuzzer, sanitizers)
#   scripts/install-deps.sh valgrind   valgrind (make check-valgrind)
#   scripts/install-deps.sh lint       cppcheck (make lint)
#   scripts/install-deps.sh plot       Chromium, which the test cli_plot_renders draws the plot with, and
#                                      python3 for the PyTorch snapshot converter's test
#   scripts/install-deps.sh python     python3 with venv (the test python_package: pip install ./python
#                                      offline, in a fresh virtual environment)
#   scripts/install-deps.sh vulkan     the Vulkan loader and Mesa's lavapipe, a Vulkan driver on the CPU
#                                      (the tests vulkan_references*, bench/vulkan_refs), and the Khronos
#                                      headers (vulkan_declarations_match). The shader is shipped
#                                      compiled; scripts/gen-spirv.sh needs glslang-tools too
# Several may be given at once.
set -eu
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null; then SUDO=sudo; else
        echo "install-deps: run as root (or install sudo): needs apt-get" >&2; exit 1
    fi
fi
# binutils: readelf, for the test tls_block_is_small; pkgconf: install_and_use builds through tidepool.pc
packages="gcc libc6-dev binutils make cmake gzip pkgconf"
for extra in "$@"; do
    case "$extra" in
        fuzz) packages="$packages clang libclang-rt-dev" ;;
        valgrind) packages="$packages valgrind" ;;
        lint) packages="$packages cppcheck" ;;
        plot) packages="$packages chromium python3" ;;
        python) packages="$packages python3 python3-venv" ;;
        vulkan) packages="$packages libvulkan1 mesa-vulkan-drivers libvulkan-dev" ;;
        *) echo "install-deps: unknown extra '$extra' (known: fuzz, valgrind, lint, plot, python, vulkan)" >&2; exit 2 ;;
    esac
done
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
# shellcheck disable=SC2086 # the list is meant to split into words
$SUDO apt-get install -y -q --no-install-recommends $packages
