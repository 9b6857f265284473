#!/bin/sh
# Installs the Debian/Ubuntu packages shardline builds and tests with, when
# any is missing. Needs root (or sudo); otherwise prints the command to run.
PKGS="build-essential pkg-config libopenmpi-dev openmpi-bin libzmq3-dev \
libprotobuf-c-dev protobuf-c-compiler check libcjson-dev libonig-dev libutf8proc-dev python3 python3-pip \
libmicrohttpd-dev prometheus curl valgrind systemd clang libclang-rt-dev libomp-dev"
missing=""
for p in $PKGS; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing="$missing $p"
done
# Hugging Face tokenizers: the reference the tokenizer conformance test
# compares against (pinned: decode of normalized added tokens changed in 0.23).
# openai: the official client the HTTP API tests drive (pinned).
pip_deps() {
	python3 -c 'import tokenizers, openai, sys; sys.exit(tokenizers.__version__ != "0.23.3" or
		openai.__version__ != "3.51.0")' 2>/dev/null && return 0
	python3 -m pip install -q tokenizers==0.23.3 openai==3.51.0 2>/dev/null ||
		python3 -m pip install -q --break-system-packages tokenizers==0.23.3 openai==3.51.0
}
if [ -z "$missing" ]; then
	echo "deps: all packages present"
	pip_deps
	exit $?
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
$SUDO apt-get update -qq && $SUDO apt-get install -y -qq $missing && pip_deps
