#!/usr/bin/env bash
# Installs what building weir needs on a fresh Debian machine: a Rust toolchain (the one on
# PATH if recent enough, else Debian's rustc-web/cargo-web), plus any apt packages named.
set -euo pipefail
need_apt=("$@")
have_rust() {
  command -v cargo >/dev/null 2>&1 || return 1
  local v; v=$(rustc --version | awk '{print $2}')
  [ "$(printf '%s\n1.85.0\n' "$v" | sort -V | head -n1)" = "1.85.0" ]
}
[ -x "$HOME/.cargo/bin/cargo" ] && export PATH="$HOME/.cargo/bin:$PATH"
if ! have_rust; then
  need_apt+=(rustc-web cargo-web gcc libc6-dev)
fi
missing=()
for p in "${need_apt[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}" >&2
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi
have_rust || { echo "setup: no Rust toolchain >= 1.85 available" >&2; exit 1; }
