#!/bin/sh
# Installs the Debian/Ubuntu packages shardline builds and tests with, when
# any is missing. Needs root (or sudo); otherwise prints the command to run.
PKGS="build-essential pkg-config libopenmpi-dev openmpi-bin libzmq3-dev \
libprotobuf-c-dev protobuf-c-compiler check libcjson-dev python3"
missing=""
for p in $PKGS; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing="$missing $p"
done
if [ -z "$missing" ]; then
	echo "deps: all packages present"
	exit 0
fi
echo "deps: missing:$missing"
if [ "$(id -u)" != 0 ]; then
	if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
		SUDO=sudo
	else
		echo "deps: not root; run as root:"
		echo "  apt-get update && apt-get install -y$missing"
		exit 1
	fi
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq && $SUDO apt-get install -y -qq $missing
