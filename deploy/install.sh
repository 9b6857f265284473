#!/bin/sh
# deploy/install.sh — installs shardline as a system service (deploy/README.md):
#   the binaries under /opt/shardline/bin (from a `make bundle` tree or build/bin),
#   the `shardline` system user, /etc/shardline/ with
#     coordinator.env      the coordinator's model, tokenizer and binds
#     node-a.env           node group "a": NP, NODE_ARGS, MPIRUN_OPTS, GRACE_S
#     keys/                CURVE pairs made here (coordinator, node, client);
#                          keys/nodes/ and keys/clients/ hold the public keys
#                          the coordinator accepts
#     api-key              the HTTP API's bearer key (random)
#   and the systemd units (not enabled: the last lines say what to run).
# Existing config and keys are kept: running it again only updates the
# binaries and units.
#
# usage: sh deploy/install.sh [--from DIR] [--model PATH] [--model-name NAME]
#                             [--coordinator HOST] [--root DIR]
#   --from DIR      a folder holding bin/shardline-* (default: bundle, else build)
#   --model PATH    a GGUF file or Hugging Face folder, same path on every host:
#                   written into both env files (default: edit them later)
#   --coordinator H the coordinator's host name as node leaders reach it
#                   (default: this host's name)
#   --root DIR      install under DIR instead of / (a staging tree: no user is
#                   made, nothing is chowned, systemd is not told); the tests use it
set -eu
from=""; model=""; model_name=""; coord_host=""; root=""
while [ $# -gt 0 ]; do
	case $1 in
	--from) from=$2; shift 2 ;;
	--model) model=$2; shift 2 ;;
	--model-name) model_name=$2; shift 2 ;;
	--coordinator) coord_host=$2; shift 2 ;;
	--root) root=$2; shift 2 ;;
	-h|--help) sed -n '2,28p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "install.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
	esac
done
here=$(cd "$(dirname "$0")" && pwd)
if [ -z "$from" ]; then
	for d in "$here/../bundle" "$here/../build"; do [ -x "$d/bin/shardline-node" ] && { from=$d; break; }; done
fi
[ -n "$from" ] && [ -x "$from/bin/shardline-coordinator" ] ||
	{ echo "install.sh: no binaries: build first (make, or make bundle), or give --from DIR" >&2; exit 1; }
staging=0; [ -n "$root" ] && staging=1
if [ $staging = 0 ] && [ "$(id -u)" != 0 ]; then
	echo "install.sh: run as root (or --root DIR to stage a tree)" >&2; exit 1
fi
say() { echo "install: $*"; }
opt=$root/opt/shardline; etc=$root/etc/shardline; units=$root/etc/systemd/system

# 1. binaries: the whole tree when it is a bundle (its lib/ and env.sh too)
mkdir -p "$opt" "$etc/keys/nodes" "$etc/keys/clients" "$units"
cp -R "$from/bin" "$opt/"
[ -d "$from/lib" ] && cp -R "$from/lib" "$opt/"
[ -f "$from/env.sh" ] && cp "$from/env.sh" "$opt/"
say "binaries in $opt/bin"

# 2. the service user: owns nothing but reads /etc/shardline
if [ $staging = 0 ] && ! id shardline >/dev/null 2>&1; then
	useradd --system --user-group --home-dir /var/lib/shardline --create-home \
		--shell /usr/sbin/nologin shardline
	say "made the system user shardline (home /var/lib/shardline: its ssh keys for mpirun)"
fi

# 3. CURVE key pairs, once; the coordinator accepts the node and client keys
for name in coordinator node client; do
	[ -f "$etc/keys/$name.key" ] || "$opt/bin/shardline" keygen --out "$etc/keys" --name "$name" >/dev/null
done
cp "$etc/keys/node.pub" "$etc/keys/nodes/node.pub"
cp "$etc/keys/client.pub" "$etc/keys/clients/client.pub"
if [ ! -f "$etc/api-key" ]; then
	(umask 077; od -An -N24 -tx1 /dev/urandom | tr -d ' \n' >"$etc/api-key"; echo >>"$etc/api-key")
fi
say "CURVE keys in $etc/keys (coordinator, node, client); HTTP API key in $etc/api-key"

# 4. config, once
if [ -z "$model_name" ]; then
	model_name=$(basename "${model:-/models/llama}"); model_name=${model_name%.gguf}
fi
tokenizer=/etc/shardline/tokenizer.json
if [ -n "$model" ]; then
	if [ -d "$model" ]; then tokenizer=$model/tokenizer.json; else tokenizer=$model; fi
fi
coord_host=${coord_host:-$(hostname)}
if [ ! -f "$etc/coordinator.env" ]; then
	cat >"$etc/coordinator.env" <<EOF
# shardline-coordinator.service (deploy/README.md). CURVE guards the ZeroMQ
# binds and a bearer key the HTTP API, so all three may face other hosts.
MODEL_NAME=$model_name
# a tokenizer.json (with its tokenizer_config.json beside it) or the GGUF file
TOKENIZER=$tokenizer
CLIENT_BIND=tcp://0.0.0.0:5555
NODE_BIND=tcp://0.0.0.0:5556
HTTP_BIND=0.0.0.0:8000
# more flags, e.g. --route load --max-queue 4096 (shardline-coordinator --help)
COORD_ARGS=
EOF
	say "wrote $etc/coordinator.env"
fi
if [ ! -f "$etc/node-a.env" ]; then
	cat >"$etc/node-a.env" <<EOF
# shardline-node@a.service (deploy/README.md): one node group.
# NP ranks in all (tp x pp); one host's GPUs, or every host of MPIRUN_OPTS' hostfile.
NP=1
NODE_ARGS=--tp 1 --pp 1 --model ${model:-/models/llama} --model-name $model_name --coordinator tcp://$coord_host:5556
# Two hosts: a hostfile, rank placement, and the interface (or subnet) MPI
# uses between them; without the last two Open MPI may pick a docker0-style
# interface and hang. NCCL_SOCKET_IFNAME does the same for NCCL.
#MPIRUN_OPTS=--hostfile /etc/shardline/hostfile --map-by slot --mca btl_tcp_if_include eth0 --mca oob_tcp_if_include eth0 -x NCCL_SOCKET_IFNAME=eth0 -x LD_LIBRARY_PATH
MPIRUN_OPTS=
GRACE_S=30
EOF
	say "wrote $etc/node-a.env"
fi

# 5. units
cp "$here/shardline-coordinator.service" "$here/shardline-node@.service" "$units/"
say "units in $units"
if [ $staging = 0 ]; then
	chown -R root:shardline "$etc"
	chmod 750 "$etc" "$etc/keys"
	# secret keys: readable by their user only (the programs refuse group-readable ones)
	chown shardline:shardline "$etc"/keys/*.key "$etc/api-key"
	chmod 600 "$etc"/keys/*.key "$etc/api-key"
	if [ -d /run/systemd/system ]; then systemctl daemon-reload; fi
fi
say "next: check $etc/coordinator.env and $etc/node-a.env, then"
say "  systemctl enable --now shardline-coordinator shardline-node@a"
say "  curl -H \"Authorization: Bearer \$(cat $etc/api-key)\" http://$coord_host:8000/v1/models"
