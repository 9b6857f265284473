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
# jinja2: renders the tool-calling chat-template fixtures again
# (tests/chat_tools_conformance.py). jsonschema: what
# tests/http/structured.py validates constrained output with.
pip_deps() {
	python3 -c 'import tokenizers, openai, jinja2, sys, importlib.metadata as m
sys.exit(tokenizers.__version__ != "0.23.3" or openai.__version__ != "3.51.0" or
	 jinja2.__version__ != "3.1.6" or m.version("jsonschema") != "4.26.0")' 2>/dev/null && return 0
	python3 -m pip install -q tokenizers==0.23.3 openai==3.51.0 jinja2==3.1.6 jsonschema==4.26.0 2>/dev/null ||
		python3 -m pip install -q --break-system-packages tokenizers==0.23.3 openai==3.51.0 \
			jinja2==3.1.6 jsonschema==4.26.0
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
# promtool (tests/http/serve.sh lints /metrics with `promtool check metrics`)
# ships only inside Debian's prometheus package: there is no promtool-only
# package, and the test needs nothing else of it. So, for that package
# alone: no recommends (they
# would add node-exporter, a second daemon), and while apt runs a
# policy-rc.d that forbids starting services (Debian's documented hook), so
# the Prometheus server is installed but never started or enabled here.
# An existing policy-rc.d is the operator's: it is left alone.
# (SL_POLICY_RC_D: another path, for tests/deps.sh, which runs this script
# with apt-get replaced.)
policy=${SL_POLICY_RC_D:-/usr/sbin/policy-rc.d}
guard=""
case " $missing " in *" prometheus "*)
	if [ ! -e "$policy" ]; then
		guard=$policy
		printf '#!/bin/sh\n# tools/install-deps.sh: no service starts while it installs\nexit 101\n' |
			$SUDO tee "$guard" >/dev/null && $SUDO chmod 755 "$guard"
	fi ;;
esac
rest=""; prom=""
for p in $missing; do [ "$p" = prometheus ] && prom=prometheus || rest="$rest $p"; done
$SUDO apt-get update -qq &&
	{ [ -z "$rest" ] || $SUDO apt-get install -y -qq $rest; } &&
	{ [ -z "$prom" ] || $SUDO apt-get install -y -qq --no-install-recommends prometheus; }
rc=$?
if [ -n "$guard" ]; then
	$SUDO rm -f "$guard"
	# systemd hosts: installed units stay disabled and stopped
	command -v systemctl >/dev/null 2>&1 && $SUDO systemctl disable --now prometheus >/dev/null 2>&1
fi
[ $rc -eq 0 ] && pip_deps
