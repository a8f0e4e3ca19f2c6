#!/usr/bin/env bash
# scripts/install-deps against a fake package database (dpkg-query, apt-get and sudo on PATH, recording
# what they are asked): only the missing packages of the command are installed; without root or
# password-less sudo, one message naming them for Debian/Ubuntu, RHEL-likes and conda and the wheel,
# exit 1 (required) or a warning and exit 0 (optional only); never a prompt.
set -euo pipefail
root=$1
# The non-root cases run as nobody (setpriv): only root can switch to it.
[[ $(id -u) -eq 0 ]] && command -v setpriv >/dev/null || { echo "skipped: needs root and setpriv"; exit 77; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir "$work/bin"
# installed: every package but those named in $MISSING
cat > "$work/bin/dpkg-query" <<'F'
#!/bin/sh
for p in $MISSING; do [ "$p" = "$3" ] && exit 1; done
printf 'install ok installed'
F
printf '#!/bin/sh\necho "apt-get $*" >> "$LOG"\n' > "$work/bin/apt-get"
printf '#!/bin/sh\necho "sudo $*" >> "$LOG"\n[ "$1" = -n ] && [ -n "$SUDO_OK" ] && shift && exec "$@"\nexit 1\n' > "$work/bin/sudo"
chmod +x "$work/bin"/*
# A copy nobody can read: the checkout may lie below a folder only its owner enters (mktemp -d's 700).
cp "$root/scripts/install-deps" "$work/install-deps"
chmod 755 "$work" "$work/install-deps" && touch "$work/log" && chmod 666 "$work/log"
run() {  # run AS MISSING SUDO_OK ARGS...: output and exit status in $out, $rc
  local as=$1 missing=$2 sudo_ok=$3
  shift 3
  : > "$work/log"
  local cmd=(env PATH="$work/bin:/usr/bin:/bin" MISSING="$missing" SUDO_OK="$sudo_ok" LOG="$work/log" bash "$work/install-deps" "$@")
  set +e
  # From the work folder: the caller's may be one nobody cannot enter.
  if [[ $as == user ]]; then out=$(cd "$work" && setpriv --reuid=65534 --regid=65534 --clear-groups "${cmd[@]}" 2>&1 </dev/null)
  else out=$("${cmd[@]}" 2>&1 </dev/null); fi
  rc=$?
  set -e
}
check() { if ! eval "$1"; then echo "FAILED: $1"; echo "output: $out"; echo "log: $(cat "$work/log")"; exit 1; fi; }

run root "" "" test
check '[[ $rc -eq 0 && -z $out && ! -s $work/log ]]'                               # nothing missing: nothing done
run root "clang ccache" "" test
check '[[ $rc -eq 0 ]] && grep -qx "apt-get install -y -qq --no-install-recommends clang ccache" "$work/log"'
run root "clang ccache" "" run                                                     # not what `run` needs
check '[[ $rc -eq 0 && ! -s $work/log ]]'
run user "libeigen3-dev libhdf5-dev" "" run
check '[[ $rc -eq 1 && $(wc -l <<<"$out") -eq 1 ]]'
check '[[ $out == *"apt-get install libeigen3-dev"* && $out == *"dnf install eigen3-devel"* ]]'
check '[[ $out == *"conda install -c conda-forge eigen"* && $out == *"wheel"* && $out != *libhdf5* ]]'
check '! grep -q "apt-get" "$work/log" && ! grep -q "^sudo [^-]" "$work/log"'  # never apt-get, never a prompting sudo
run user "libhdf5-dev openmpi-bin" "" run                                          # optional only: a warning
check '[[ $rc -eq 0 && $out == *"libhdf5-dev openmpi-bin not installed"* && $(wc -l <<<"$out") -eq 1 ]]'
run user "ccache" "1" test                                                         # password-less sudo
check '[[ $rc -eq 0 ]] && grep -q "^sudo -n apt-get install -y -qq --no-install-recommends ccache" "$work/log"'
run root "" "" deploy
check '[[ $rc -eq 2 && $out == *"unknown command '"'"'deploy'"'"' (valid: run, test)"* ]]'
echo "install-deps: 8 cases ok"
