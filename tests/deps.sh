#!/bin/sh
# `make deps` gets promtool without running a Prometheus server (issue 39:
# it installed the whole server and, on systemd hosts, started it).
# `make -n deps` must run tools/install-deps.sh; that script then runs
# here with apt-get, dpkg-query, systemctl, id and python3 replaced by
# stubs on PATH that record what they are asked (nothing is installed),
# every package reported missing, and the policy-rc.d path pointed into a
# scratch directory (SL_POLICY_RC_D). Checked:
#   - prometheus is installed on its own, --no-install-recommends (its
#     recommends are a second daemon, node-exporter), and no other
#     prometheus-* package is asked for;
#   - while it installs, policy-rc.d exists and answers 101 ("action
#     forbidden", Debian's invoke-rc.d policy), so no service starts;
#   - afterwards the guard is gone and `systemctl disable --now prometheus`
#     ran; an operator's own policy-rc.d is left as it was.
# Prints "N passed, N failed".
set -u
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0; fail=0
ok() { pass=$((pass + 1)); }
bad() { echo "FAIL: $*"; fail=$((fail + 1)); }

recipe=$(make -n deps 2>/dev/null)
printf '%s\n' "$recipe" | grep -q 'sh tools/install-deps.sh' && ok ||
	bad "make -n deps does not run tools/install-deps.sh: $recipe"

mkdir "$tmp/bin"
stub() { printf '#!/bin/sh\n%s\n' "$2" >"$tmp/bin/$1"; chmod +x "$tmp/bin/$1"; }
stub dpkg-query 'exit 1' # every package missing
stub id 'echo 0'         # root: no sudo
stub python3 'exit 0'    # the pip part is not under test
stub systemctl 'echo "systemctl $*" >>"$LOG"'
# apt-get: one line per call; an install also notes what policy-rc.d
# answers for starting its service (as invoke-rc.d asks it)
stub apt-get 'printf "apt-get %s" "$*" >>"$LOG"
case " $* " in *" install "*)
	if [ -x "$SL_POLICY_RC_D" ]; then "$SL_POLICY_RC_D" prometheus start; printf " [policy %s]" $? >>"$LOG"
	else printf " [no policy]" >>"$LOG"; fi ;;
esac
echo >>"$LOG"'

run() { # LOG: install-deps.sh with the stubs; the calls into LOG
	LOG=$1 SL_POLICY_RC_D=$tmp/policy-rc.d PATH="$tmp/bin:$PATH" sh tools/install-deps.sh >"$1.out" 2>&1
}

run "$tmp/calls"
grep -q '^apt-get install .*--no-install-recommends prometheus \[policy 101\]$' "$tmp/calls" && ok ||
	bad "prometheus not installed alone, without recommends, under a policy that forbids starting it"
grep '^apt-get install' "$tmp/calls" | grep -v -- '--no-install-recommends prometheus' |
	grep -qw prometheus && bad "prometheus also installed with the other packages" || ok
grep -qE 'prometheus-[a-z]' "$tmp/calls" && bad "a prometheus-* package was asked for" || ok
grep '^apt-get install' "$tmp/calls" | grep -v -- '--no-install-recommends prometheus' | grep -qw libmicrohttpd-dev && ok ||
	bad "the other packages were not installed"
[ ! -e "$tmp/policy-rc.d" ] && ok || bad "the policy-rc.d guard was left in place"
grep -q '^systemctl disable --now prometheus$' "$tmp/calls" && ok || bad "prometheus not disabled and stopped"

# an operator's policy-rc.d stays as it is
printf '#!/bin/sh\nexit 0\n' >"$tmp/policy-rc.d"; chmod 755 "$tmp/policy-rc.d"
cp "$tmp/policy-rc.d" "$tmp/policy.orig"
run "$tmp/calls2"
cmp -s "$tmp/policy-rc.d" "$tmp/policy.orig" && ok || bad "the operator's policy-rc.d was changed or removed"
[ $fail -eq 0 ] || { echo "install-deps.sh calls:"; cat "$tmp/calls" "$tmp/calls.out"; }
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
