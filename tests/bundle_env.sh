#!/bin/sh
# tools/bundle.sh's env.sh on the CPU: a bundle made from a stand-in build
# (a program and a test, no libraries to copy) is found when env.sh is sourced by
# bash from anywhere, by a POSIX sh script from the folder that holds
# bundle/, by a script inside the bundle, and with SL_BUNDLE from anywhere;
# where none of these holds, it says so and sets nothing; it leaves no
# variable of its own behind. A second. Prints "N passed, N failed".
. tests/harness.sh

mkdir -p "$tmp/build/bin" "$tmp/build/tests/gpu" "$tmp/work/scripts" "$tmp/elsewhere"
cp /bin/true "$tmp/build/bin/sl-stand-in"
cp /bin/true "$tmp/build/tests/gpu/test_stand_in"
sh tools/bundle.sh "$tmp/build" "$tmp/work/bundle" > "$tmp/bundle.log" 2>&1 && ok ||
	{ bad "tools/bundle.sh failed"; tail -5 "$tmp/bundle.log"; }
b=$tmp/work/bundle
[ -f "$b/env.sh" ] && [ -x "$b/bin/sl-stand-in" ] && ok || bad "no env.sh or program in the bundle"

# probe SHELL SCRIPT_DIR CWD [VAR=VALUE]: a script in SCRIPT_DIR, run from
# CWD, sources bundle/env.sh as the docs say (. bundle/env.sh, or the full
# path under bash) and prints LD_LIBRARY_PATH's first entry, the program
# PATH finds, and whether env.sh's own variables are left
probe() {
	sh_=$1 dir=$2 cwd=$3; shift 3
	cat > "$dir/probe.sh" <<PROBE
LD_LIBRARY_PATH=/base; export LD_LIBRARY_PATH
. $src
echo "lib=\${LD_LIBRARY_PATH%%:*}"
echo "bin=\$(command -v sl-stand-in || echo none)"
echo "left=\${sl_env_dir:-}\${sl_env_try:-}"
PROBE
	(cd "$cwd" && env "$@" "$sh_" "$dir/probe.sh") > "$tmp/probe.out" 2> "$tmp/probe.err"
}
want() { # LABEL EXPECTED_LIB
	grep -qx "lib=$2" "$tmp/probe.out" && grep -qx "left=" "$tmp/probe.out" &&
		{ [ "$2" = /base ] || grep -qx "bin=$b/bin/sl-stand-in" "$tmp/probe.out"; } && ok ||
		{ bad "$1: $(tr '\n' ' ' < "$tmp/probe.out") $(cat "$tmp/probe.err")"; }
}

src="bundle/env.sh"
probe sh "$tmp/work/scripts" "$tmp/work" SL_BUNDLE=; want "sh, from the folder holding bundle/" "$b/lib"
src="$b/env.sh"
probe bash "$tmp/elsewhere" "$tmp/elsewhere" SL_BUNDLE=; want "bash, from anywhere" "$b/lib"
probe sh "$b" "$tmp/elsewhere" SL_BUNDLE=; want "sh, a script inside the bundle" "$b/lib"
probe sh "$tmp/elsewhere" "$tmp/elsewhere" SL_BUNDLE="$b"; want "sh, SL_BUNDLE" "$b/lib"
probe sh "$tmp/elsewhere" "$tmp/elsewhere" SL_BUNDLE=; want "sh, nowhere to find it" /base
grep -q "cannot tell where the bundle is" "$tmp/probe.err" && ok ||
	bad "no message when the bundle cannot be found: $(cat "$tmp/probe.err")"

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
