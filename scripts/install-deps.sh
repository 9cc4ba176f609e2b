#!/bin/sh
# Installs what building and testing tidepool needs on Debian: a C compiler, make, CMake, gzip.
# Run as root, or with sudo available.
set -eu
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null; then SUDO=sudo; else
        echo "install-deps: run as root (or install sudo): needs apt-get" >&2; exit 1
    fi
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends gcc libc6-dev make cmake gzip
